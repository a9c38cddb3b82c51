package sse_test

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"testing/iotest"

	"github.com/google/go-cmp/cmp"

	"github.com/go-llmflow/llmflow/sse"
)

var update = flag.Bool("update", false, "rewrite the golden files (and the FuzzCopy seed corpus) in testdata")

// goldenResult is the expected Result of one transcript, stored as
// testdata/<name>.result.json.
type goldenResult struct {
	Drop sse.Result // KeepUsage=false
	Keep sse.Result // KeepUsage=true
}

// recorder is a dst that counts writes and flushes, and the source's
// reads made while a write was not flushed (an event held back while
// Copy may wait for the engine).
type recorder struct {
	bytes.Buffer
	writes, flushes int
	unflushed       bool
	heldAtRead      int
}

func (r *recorder) Write(p []byte) (int, error) {
	r.writes++
	r.unflushed = true
	return r.Buffer.Write(p)
}

func (r *recorder) Flush() error {
	r.flushes++
	r.unflushed = false
	return nil
}

// source wraps src: every Read checks that nothing written is unflushed.
func (r *recorder) source(src io.Reader) io.Reader {
	return readFunc(func(p []byte) (int, error) {
		if r.unflushed {
			r.heldAtRead++
		}
		return src.Read(p)
	})
}

type readFunc func(p []byte) (int, error)

func (f readFunc) Read(p []byte) (int, error) { return f(p) }

// check fails tb unless every write was flushed before Copy read its
// source again and before it returned, and at most once per write.
func (r *recorder) check(tb testing.TB) {
	tb.Helper()
	if r.heldAtRead > 0 || r.unflushed || r.flushes > r.writes || r.writes > 0 && r.flushes == 0 {
		tb.Errorf("Copy: %d writes, %d flushes, %d reads of the source with a write not flushed, unflushed at the end %v",
			r.writes, r.flushes, r.heldAtRead, r.unflushed)
	}
}

// MustCopy runs sse.Copy from src and fails the test on an error or if
// a write was not flushed before Copy read src again or returned.
func MustCopy(tb testing.TB, src io.Reader, keep bool) (string, sse.Result) {
	tb.Helper()
	var dst recorder
	res, err := sse.Copy(&dst, dst.source(src), sse.Options{KeepUsage: keep, Flush: dst.Flush})
	if err != nil {
		tb.Fatalf("Copy: %v", err)
	}
	dst.check(tb)
	if res.Bytes != int64(dst.Len()) {
		tb.Errorf("Result.Bytes = %d, wrote %d", res.Bytes, dst.Len())
	}
	return dst.String(), res
}

// chunkReader returns its chunks one per Read.
type chunkReader struct{ chunks [][]byte }

// readsOf returns a reader that yields each of reads in a read of its own.
func readsOf(reads ...string) *chunkReader {
	r := &chunkReader{}
	for _, s := range reads {
		r.chunks = append(r.chunks, []byte(s))
	}
	return r
}

func (r *chunkReader) Read(p []byte) (int, error) {
	for len(r.chunks) > 0 && len(r.chunks[0]) == 0 {
		r.chunks = r.chunks[1:]
	}
	if len(r.chunks) == 0 {
		return 0, io.EOF
	}
	n := copy(p, r.chunks[0])
	r.chunks[0] = r.chunks[0][n:]
	return n, nil
}

// splitAt returns a reader that yields in[:k] and in[k:] in two reads.
func splitAt(in []byte, k int) io.Reader {
	return &chunkReader{chunks: [][]byte{in[:k], in[k:]}}
}

// pairs returns a reader that yields in in 2-byte reads, the first read
// being 1 byte if odd (as test2json's tests do).
func pairs(in []byte, odd bool) io.Reader {
	var c [][]byte
	if odd && len(in) > 0 {
		c = append(c, in[:1])
		in = in[1:]
	}
	for len(in) > 2 {
		c = append(c, in[:2])
		in = in[2:]
	}
	return &chunkReader{chunks: append(c, in)}
}

// readers returns the ways a transcript is fed to the code under test:
// whole, then in many different chunkings. The output must not depend on
// the chunking.
func readers(in []byte) map[string]func() io.Reader {
	m := map[string]func() io.Reader{
		"whole":   func() io.Reader { return bytes.NewReader(in) },
		"onebyte": func() io.Reader { return iotest.OneByteReader(bytes.NewReader(in)) },
		"half":    func() io.Reader { return iotest.HalfReader(bytes.NewReader(in)) },
		"dataerr": func() io.Reader { return iotest.DataErrReader(bytes.NewReader(in)) },
		"even":    func() io.Reader { return pairs(in, false) },
		"odd":     func() io.Reader { return pairs(in, true) },
	}
	return m
}

func transcripts(tb testing.TB) []string {
	tb.Helper()
	files, err := filepath.Glob("testdata/*.sse")
	if err != nil || len(files) == 0 {
		tb.Fatalf("no transcripts in testdata: %v", err)
	}
	return files
}

func TestCopy_Golden(t *testing.T) {
	for _, file := range transcripts(t) {
		name := strings.TrimSuffix(filepath.Base(file), ".sse")
		t.Run(name, func(t *testing.T) {
			in, err := os.ReadFile(file)
			if err != nil {
				t.Fatal(err)
			}
			var got goldenResult
			drop, keep := "", ""
			drop, got.Drop = MustCopy(t, bytes.NewReader(in), false)
			keep, got.Keep = MustCopy(t, bytes.NewReader(in), true)

			base := strings.TrimSuffix(file, ".sse")
			resJSON, err := json.MarshalIndent(got, "", "\t")
			if err != nil {
				t.Fatal(err)
			}
			resJSON = append(resJSON, '\n')
			if *update {
				writeFile(t, base+".drop.golden", []byte(drop))
				writeFile(t, base+".keep.golden", []byte(keep))
				writeFile(t, base+".result.json", resJSON)
				writeFile(t, filepath.Join("testdata", "fuzz", "FuzzCopy", name), fuzzFile(in))
				return
			}
			compareFile(t, base+".drop.golden", []byte(drop))
			compareFile(t, base+".keep.golden", []byte(keep))
			// Byte for byte too: a field added to Result and missing from
			// the file decodes as its zero value, so a stale golden file
			// would pass the comparison below.
			compareFile(t, base+".result.json", resJSON)
			var want goldenResult
			if err := json.Unmarshal(readFile(t, base+".result.json"), &want); err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("Result mismatch (-want +got):\n%s", diff)
			}
		})
	}
}

// TestCopy_Chunking replays every transcript in many chunkings, including
// a split into two reads at every offset, and requires the same output and
// Result as when it is read whole.
func TestCopy_Chunking(t *testing.T) {
	for _, file := range transcripts(t) {
		name := strings.TrimSuffix(filepath.Base(file), ".sse")
		t.Run(name, func(t *testing.T) {
			in := readFile(t, file)
			for _, keep := range []bool{false, true} {
				want, wantRes := MustCopy(t, bytes.NewReader(in), keep)
				check := func(how string, src io.Reader) {
					t.Helper()
					got, res := MustCopy(t, src, keep)
					if got != want {
						t.Errorf("keep=%v %s: output differs from whole read:\n%s", keep, how, cmp.Diff(want, got))
					}
					if diff := cmp.Diff(wantRes, res); diff != "" {
						t.Errorf("keep=%v %s: Result differs from whole read (-whole +got):\n%s", keep, how, diff)
					}
				}
				for how, r := range readers(in) {
					check(how, r())
				}
				for k := 0; k <= len(in); k++ {
					check("split at "+strconv.Itoa(k), splitAt(in, k))
				}
			}
		})
	}
}

// TestCopy_KeepIsIdentity: with KeepUsage every transcript is forwarded
// unchanged up to and including [DONE].
func TestCopy_KeepIsIdentity(t *testing.T) {
	for _, file := range transcripts(t) {
		in := readFile(t, file)
		got, res := MustCopy(t, bytes.NewReader(in), true)
		want := string(in)
		if res.Done {
			// Only comments.sse has bytes after [DONE].
			want = want[:len(got)]
		}
		if got != want {
			t.Errorf("%s: KeepUsage output is not the input:\n%s", file, cmp.Diff(want, got))
		}
		if !strings.HasPrefix(string(in), got) {
			t.Errorf("%s: output is not a prefix of the input", file)
		}
	}
}

func readFile(tb testing.TB, name string) []byte {
	tb.Helper()
	b, err := os.ReadFile(name)
	if err != nil {
		tb.Fatal(err)
	}
	return b
}

func writeFile(tb testing.TB, name string, b []byte) {
	tb.Helper()
	if err := os.MkdirAll(filepath.Dir(name), 0o755); err != nil {
		tb.Fatal(err)
	}
	if err := os.WriteFile(name, b, 0o644); err != nil {
		tb.Fatal(err)
	}
}

func compareFile(tb testing.TB, name string, got []byte) {
	tb.Helper()
	want, err := os.ReadFile(name)
	if err != nil {
		tb.Fatalf("%v (run go test -update to create it)", err)
	}
	if !bytes.Equal(want, got) {
		tb.Errorf("%s mismatch (-want +got):\n%s", name, cmp.Diff(string(want), string(got)))
	}
}

// fuzzFile encodes one []byte argument in the fuzzing corpus format.
func fuzzFile(in []byte) []byte {
	return []byte(fmt.Sprintf("go test fuzz v1\n[]byte(%s)\n", strconv.Quote(string(in))))
}

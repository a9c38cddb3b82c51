package sse_test

import (
	"bytes"
	"errors"
	"io"
	"strings"
	"testing"
	"testing/iotest"

	"github.com/google/go-cmp/cmp"

	"github.com/go-llmflow/llmflow/sse"
)

// ev is a comparable copy of an sse.Event; HasData tells a nil Data apart.
type ev struct {
	Raw, Data string
	HasData   bool
}

// readAll reads every event from r. tail is the incomplete last event
// returned with io.ErrUnexpectedEOF.
func readAll(tb testing.TB, src io.Reader, max int) (evs []ev, tail string, err error) {
	tb.Helper()
	r := sse.NewReader(src, max)
	for {
		e, err := r.Next()
		switch err {
		case nil:
			evs = append(evs, ev{string(e.Raw), string(e.Data), e.Data != nil})
		case io.ErrUnexpectedEOF:
			if e.Data != nil {
				tb.Errorf("incomplete event has Data %q", e.Data)
			}
			tail = string(e.Raw)
			if _, err := r.Next(); err != io.EOF {
				tb.Errorf("Next after ErrUnexpectedEOF: %v, want io.EOF", err)
			}
			return evs, tail, nil
		case io.EOF:
			if _, err := r.Next(); err != io.EOF {
				tb.Errorf("Next after io.EOF: %v, want io.EOF", err)
			}
			return evs, "", nil
		default:
			return evs, "", err
		}
	}
}

func TestReader_Next(t *testing.T) {
	tests := []struct {
		name string
		in   string
		want []ev
		tail string
	}{
		{"LF", "data: a\n\ndata: b\n\n", []ev{{"data: a\n\n", "a", true}, {"data: b\n\n", "b", true}}, ""},
		{"CRLF", "data: a\r\n\r\ndata: b\r\n\r\n", []ev{{"data: a\r\n\r\n", "a", true}, {"data: b\r\n\r\n", "b", true}}, ""},
		{"CR", "data: a\r\rdata: b\r\r", []ev{{"data: a\r\r", "a", true}, {"data: b\r\r", "b", true}}, ""},
		{"Mixed", "data: a\r\ndata: b\rdata: c\n\r\n", []ev{{"data: a\r\ndata: b\rdata: c\n\r", "a\nb\nc", true}, {"\n", "", false}}, ""},
		{"NoSpace", "data:a\n\n", []ev{{"data:a\n\n", "a", true}}, ""},
		{"OneSpaceOnly", "data:  a \n\n", []ev{{"data:  a \n\n", " a ", true}}, ""},
		{"MultiLine", "data: a\ndata:\ndata: c\n\n", []ev{{"data: a\ndata:\ndata: c\n\n", "a\n\nc", true}}, ""},
		{"EmptyData", "data:\n\n", []ev{{"data:\n\n", "", true}}, ""},
		{"DataNoColon", "data\n\n", []ev{{"data\n\n", "", true}}, ""},
		{"Comment", ": ping\n\n", []ev{{": ping\n\n", "", false}}, ""},
		{"Fields", "event: x\nid: 1\nretry: 5\n data: no\ndatax: no\nDATA: no\ndata: yes\n\n", []ev{{"event: x\nid: 1\nretry: 5\n data: no\ndatax: no\nDATA: no\ndata: yes\n\n", "yes", true}}, ""},
		{"BlankLines", "\n\r\n\r", []ev{{"\n", "", false}, {"\r", "", false}, {"\n", "", false}, {"\r", "", false}}, ""},
		{"Partial", "data: a\n\ndata: b\n", []ev{{"data: a\n\n", "a", true}}, "data: b\n"},
		{"PartialNoEOL", "data: a\n\ndata: b", []ev{{"data: a\n\n", "a", true}}, "data: b"},
		{"PartialCR", "data: a\r", nil, "data: a\r"},
		{"CRLFBlankAtEnd", "data: a\r\n\r", []ev{{"data: a\r\n\r", "a", true}}, ""},
		{"Empty", "", nil, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for how, r := range readers([]byte(tt.in)) {
				got, tail, err := readAll(t, r(), 0)
				if err != nil {
					t.Fatalf("%s: %v", how, err)
				}
				if diff := cmp.Diff(tt.want, got); diff != "" {
					t.Errorf("%s: events mismatch (-want +got):\n%s", how, diff)
				}
				if tail != tt.tail {
					t.Errorf("%s: tail = %q, want %q", how, tail, tt.tail)
				}
			}
		})
	}
}

// A CR at the end of one read followed by an LF at the start of the next
// is one line ending, wherever it falls.
func TestReader_CRLFAcrossReads(t *testing.T) {
	in := "data: a\r\ndata: b\r\n\r\n: c\r\n\r\ndata: [DONE]\r\n\r\n"
	want := []ev{{"data: a\r\ndata: b\r\n\r\n", "a\nb", true}, {": c\r\n\r\n", "", false}, {"data: [DONE]\r\n\r\n", "[DONE]", true}}
	for i := 0; i < len(in); i++ {
		if in[i] != '\r' {
			continue
		}
		got, tail, err := readAll(t, splitAt([]byte(in), i+1), 0)
		if err != nil || tail != "" {
			t.Fatalf("split after CR at %d: err %v, tail %q", i, err, tail)
		}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("split after CR at %d (-want +got):\n%s", i, diff)
		}
	}
}

func TestReader_ErrEventTooLarge(t *testing.T) {
	in := "data: 12345\n\ndata: 123456\n\ndata: 1\n\n"
	r := sse.NewReader(strings.NewReader(in), len("data: 12345\n\n"))
	if e, err := r.Next(); err != nil || string(e.Data) != "12345" {
		t.Fatalf("Next = %q, %v", e.Data, err)
	}
	for i := 0; i < 2; i++ { // sticky
		if _, err := r.Next(); !errors.Is(err, sse.ErrEventTooLarge) {
			t.Fatalf("Next = %v, want ErrEventTooLarge", err)
		}
	}
}

func TestReader_ReadError(t *testing.T) {
	errUp := errors.New("reset")
	r := sse.NewReader(io.MultiReader(strings.NewReader("data: a\n\ndata: b"), iotest.ErrReader(errUp)), 0)
	if _, err := r.Next(); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 2; i++ {
		if _, err := r.Next(); err != errUp {
			t.Fatalf("Next = %v, want %v", err, errUp)
		}
	}
}

func TestReader_Reset(t *testing.T) {
	r := sse.NewReader(strings.NewReader("data: a\n\ndata: tr"), 0)
	for {
		if _, err := r.Next(); err != nil {
			break
		}
	}
	r.Reset(strings.NewReader("data: b\n\n"), 0)
	if e, err := r.Next(); err != nil || string(e.Raw) != "data: b\n\n" {
		t.Fatalf("after Reset: %q, %v", e.Raw, err)
	}
}

// refParse is the naive reference: the package's event rules applied to
// the whole input at once, with strings.
func refParse(in string) (evs []ev, tail string) {
	evStart, i := 0, 0
	var data []string
	prevCRLF := false
	for i < len(in) {
		j := strings.IndexAny(in[i:], "\r\n")
		if j < 0 {
			break
		}
		j += i
		line := in[i:j]
		next, crlf := j+1, false
		if in[j] == '\r' && next < len(in) && in[next] == '\n' && (line != "" || prevCRLF) {
			next, crlf = next+1, true
		}
		i = next
		if line == "" {
			evs = append(evs, ev{in[evStart:i], strings.Join(data, "\n"), data != nil})
			evStart, data, prevCRLF = i, nil, false
			continue
		}
		prevCRLF = crlf
		if strings.HasPrefix(line, ":") {
			continue
		}
		name, value, found := strings.Cut(line, ":")
		if found {
			value = strings.TrimPrefix(value, " ")
		}
		if name == "data" {
			data = append(data, value)
		}
	}
	return evs, in[evStart:]
}

func FuzzReader(f *testing.F) {
	for _, file := range transcripts(f) {
		f.Add(readFile(f, file))
	}
	for _, s := range []string{"data: a\r\n\r", "data: a\n\r\n", "\r\n\r\n", "data\rdata:\r\r\n", ":\r\n\r\n\n"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		want, wantTail := refParse(string(in))
		for _, r := range []io.Reader{bytes.NewReader(in), iotest.OneByteReader(bytes.NewReader(in)), pairs(in, true)} {
			got, tail, err := readAll(t, r, len(in)+1)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Fatalf("events differ from the reference (-ref +got):\n%s", diff)
			}
			if tail != wantTail {
				t.Fatalf("tail = %q, reference %q", tail, wantTail)
			}
		}
	})
}

// A relay of its own (the gateway's resumable streams) gets Copy's
// flushing from the Reader: what it wrote is flushed before the Reader
// reads its source again, once per read, and a failed flush ends it.
func TestReader_FlushBeforeWait(t *testing.T) {
	ev := func(s string) string { return "data: " + s + "\n\n" }
	var dst recorder
	src := dst.source(readsOf(ev("a")+ev("b"), ev("c")+ev("d")))
	rd := sse.NewReader(src, 0)
	rd.FlushBeforeWait(dst.Flush)
	for {
		e, err := rd.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		dst.Write(e.Raw)
		rd.Written()
	}
	if err := rd.Flush(); err != nil {
		t.Fatal(err)
	}
	dst.check(t)
	if dst.String() != ev("a")+ev("b")+ev("c")+ev("d") || dst.flushes != 2 {
		t.Fatalf("relayed %q in %d flushes, want the 4 events in 2 (one per read)", dst.String(), dst.flushes)
	}

	gone := errors.New("client gone")
	reads := 0
	rd = sse.NewReader(readFunc(func(p []byte) (int, error) {
		if reads++; reads > 1 {
			t.Fatal("read the source after a failed flush")
		}
		return copy(p, ev("a")), nil
	}), 0)
	rd.FlushBeforeWait(func() error { return gone })
	if _, err := rd.Next(); err != nil {
		t.Fatal(err)
	}
	rd.Written()
	_, err := rd.Next()
	var we *sse.WriteError
	if !errors.As(err, &we) || we.Err != gone || rd.Flush() != err {
		t.Fatalf("Next after a failed flush: %v; Flush: %v; want the same *WriteError wrapping %v", err, rd.Flush(), gone)
	}
}

package sse

import (
	"bytes"
	"io"
	"os"
	"path/filepath"
	"testing"
)

// The byte-search fast path of inspect must agree with the JSON scanner on
// every chunk the engines send.
func TestInspect_FastPathAgrees(t *testing.T) {
	files, _ := filepath.Glob("testdata/*.sse")
	extra := [][]byte{
		[]byte(`{"choices":[{"index":0,"delta":{"content":"usage"}}]}`),
		[]byte(`{"choices":[{"index":0,"delta":{"content":"error"}}],"usage":null}`),
		[]byte(`{"choices":[],"usage":null}`),
		[]byte(`{"choices": [ ], "usage": {"prompt_tokens": 1}}`),
		[]byte(`{"choices":[{"index":0,"delta":{"content":"choices"}}]}`),
		[]byte(`{"choices":[]}`),
		[]byte(`{"id":"x"}`),
	}
	n := 0
	for _, file := range files {
		in, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		r := NewReader(bytes.NewReader(in), 0)
		for {
			ev, err := r.Next()
			if err != nil {
				break
			}
			if ev.Data != nil {
				extra = append(extra, bytes.Clone(ev.Data))
			}
		}
	}
	for _, data := range extra {
		if bytes.HasPrefix(data, doneMarker) || !bytes.HasPrefix(data, []byte("{")) {
			continue
		}
		n++
		fast, slow := inspect(data), inspectSlow(data)
		drop := func(c chunk) bool { return c.hasUsage && c.emptyChoices }
		if fast.choices != slow.choices || fast.hasUsage != slow.hasUsage || fast.usage != slow.usage ||
			fast.isError != slow.isError || drop(fast) != drop(slow) {
			t.Errorf("inspect(%s)\nfast %+v\nslow %+v", data, fast, slow)
		}
	}
	if n < 50 {
		t.Fatalf("only %d chunks checked", n)
	}
}

func TestSkipValue(t *testing.T) {
	tests := []struct {
		in   string
		want int
	}{
		{`"a\"b"x`, 6},
		{`"a\\"x`, 5},
		{`"a\\\"b"x`, 8},
		{`{"a":"}"}x`, 9},
		{`[1,[2,"]"],{}]x`, 14},
		{`123,`, 3},
		{`null}`, 4},
		{`"abc`, -1},
		{`{"a":1`, -1},
		{``, -1},
		{`,`, -1},
	}
	for _, tt := range tests {
		if got := skipValue([]byte(tt.in), 0); got != tt.want {
			t.Errorf("skipValue(%q) = %d, want %d", tt.in, got, tt.want)
		}
	}
}

func TestParseInt(t *testing.T) {
	tests := map[string]int64{
		"0": 0, "42": 42, "-7": -7, "9223372036854775807": 1<<63 - 1, "-9223372036854775808": -1 << 63,
		"9223372036854775808": 0, "99999999999999999999": 0, "1.0": 0, "1e3": 0, "": 0, "-": 0, "null": 0, `"3"`: 0,
	}
	for in, want := range tests {
		if got := parseInt([]byte(in)); got != want {
			t.Errorf("parseInt(%q) = %d, want %d", in, got, want)
		}
	}
}

// Copy keeps its Readers in a pool; a Reader that saw a huge event must not
// keep its buffer there.
func TestCopy_PoolDropsHugeBuffers(t *testing.T) {
	big := append(append([]byte("data: "), bytes.Repeat([]byte("x"), 2*maxPooledRaw)...), "\n\n"...)
	for i := 0; i < 3; i++ {
		if _, err := Copy(io.Discard, bytes.NewReader(big), Options{}); err != nil {
			t.Fatal(err)
		}
		if rd, _ := readerPool.Get().(*Reader); rd != nil {
			if cap(rd.raw) > maxPooledRaw {
				t.Fatalf("pooled Reader keeps a %d-byte buffer", cap(rd.raw))
			}
			readerPool.Put(rd)
		}
	}
}

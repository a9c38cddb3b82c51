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

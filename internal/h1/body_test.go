package h1

import (
	"bytes"
	"io"
	"net/http/httputil"
	"testing"
	"testing/iotest"
)

// chunked encodes data in chunks of the given sizes (the rest in one).
func chunked(data []byte, sizes ...int) []byte {
	var b bytes.Buffer
	w := httputil.NewChunkedWriter(&b)
	for _, n := range sizes {
		n = min(n, len(data))
		if n > 0 {
			w.Write(data[:n])
			data = data[n:]
		}
	}
	if len(data) > 0 {
		w.Write(data)
	}
	w.Close()
	b.WriteString("\r\n")
	return b.Bytes()
}

func TestChunkedReader(t *testing.T) {
	for _, tc := range []struct {
		name, in, want string
		bad            bool
	}{
		{"Plain", "5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n", "hello world", false},
		{"Upper", "A\r\n0123456789\r\n0\r\n\r\n", "0123456789", false},
		{"Extension", "5;name=value\r\nhello\r\n0;x\r\n\r\n", "hello", false},
		{"Trailer", "5\r\nhello\r\n0\r\nX-T: 1\r\nX-U: 2\r\n\r\n", "hello", false},
		{"Empty", "0\r\n\r\n", "", false},
		{"NoSize", "\r\nhello\r\n0\r\n\r\n", "", true},
		{"BadHex", "5z\r\nhello\r\n0\r\n\r\n", "", true},
		{"MissingCRLFAfterData", "5\r\nhelloX\r\n0\r\n\r\n", "hello", true},
		{"BareLF", "5\nhello\n0\n\n", "", true},
		{"SpaceBeforeEnd", "5 \t\r\nhello\r\n0\r\n\r\n", "hello", false},
		{"SpaceBeforeExtension", "5 ;x=y\r\nhello\r\n0\r\n\r\n", "hello", false},
		{"SpaceInSize", "5 0\r\n00000\r\n0\r\n\r\n", "", true},
		{"BareLFInExtension", "5;x\ny\r\nhello\r\n0\r\n\r\n", "", true},
		{"NoSizeBeforeExtension", ";x\r\nhello\r\n0\r\n\r\n", "", true},
		{"Huge", "ffffffffffffffffff\r\nhello\r\n0\r\n\r\n", "", true},
		{"Truncated", "5\r\nhel", "hel", true},
		{"NoFinalCRLF", "5\r\nhello\r\n0\r\n", "hello", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, split := range []bool{false, true} {
				var r io.Reader = bytes.NewReader([]byte(tc.in))
				if split {
					r = iotest.OneByteReader(r)
				}
				got, err := io.ReadAll(&chunkedReader{r: r})
				if (err != nil) != tc.bad || string(got) != tc.want {
					t.Errorf("split=%v: %q, %v; want %q, error %v", split, got, err, tc.want, tc.bad)
				}
			}
		})
	}
}

// FuzzChunkedReader: what our decoder reads equals what net/http's does,
// for any input it accepts, under any split of the reads; anything
// net/http's writer encodes decodes exactly.
func FuzzChunkedReader(f *testing.F) {
	f.Add([]byte("5\r\nhello\r\n0\r\n\r\n"), []byte("hello world"), uint8(3))
	f.Add([]byte("5;a=b\r\nhello\r\n0\r\nX: y\r\n\r\n"), []byte(""), uint8(1))
	f.Fuzz(func(t *testing.T, raw, data []byte, size uint8) {
		n := int(size%64) + 1
		enc := chunked(data, n, n*2, n*3)
		for _, split := range []bool{false, true} {
			var r io.Reader = bytes.NewReader(enc)
			if split {
				r = iotest.OneByteReader(r)
			}
			got, err := io.ReadAll(&chunkedReader{r: r})
			if err != nil || !bytes.Equal(got, data) {
				t.Fatalf("encoded %q: %q %v, want %q", enc, got, err, data)
			}
		}
		ours, oerr := io.ReadAll(&chunkedReader{r: iotest.HalfReader(bytes.NewReader(raw))})
		theirs, terr := io.ReadAll(httputil.NewChunkedReader(bytes.NewReader(raw)))
		if oerr == nil && terr == nil && !bytes.Equal(ours, theirs) {
			t.Fatalf("%q: ours %q, net/http %q", raw, ours, theirs)
		}
		if oerr == nil && terr != nil && len(ours) > 0 {
			t.Fatalf("%q: ours accepted %q, net/http refused: %v", raw, ours, terr)
		}
	})
}

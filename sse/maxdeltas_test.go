package sse_test

import (
	"bytes"
	"errors"
	"strings"
	"testing"

	"github.com/go-llmflow/llmflow/sse"
)

// TestCopyMaxDeltas: a stream with more chunks with choices than
// MaxDeltas is cut before the first one beyond; one within is copied
// whole; 0 is no limit.
func TestCopyMaxDeltas(t *testing.T) {
	chunk := "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"x\"}}]}\n\n"
	usage := "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":1,\"completion_tokens\":4}}\n\n"
	stream := strings.Repeat(chunk, 4) + usage + "data: [DONE]\n\n"
	for _, tc := range []struct {
		max, deltas int
		err         error
		out         string
	}{
		{0, 4, nil, strings.Repeat(chunk, 4) + "data: [DONE]\n\n"},
		{4, 4, nil, strings.Repeat(chunk, 4) + "data: [DONE]\n\n"},
		{3, 3, sse.ErrTooManyDeltas, strings.Repeat(chunk, 3)},
		{1, 1, sse.ErrTooManyDeltas, chunk},
	} {
		var dst bytes.Buffer
		res, err := sse.Copy(&dst, strings.NewReader(stream), sse.Options{MaxDeltas: tc.max})
		if !errors.Is(err, tc.err) || res.Deltas != tc.deltas || dst.String() != tc.out || res.Done != (tc.err == nil) {
			t.Errorf("MaxDeltas %d: err %v deltas %d done %v out %q; want %v %d %q", tc.max, err, res.Deltas, res.Done, dst.String(), tc.err, tc.deltas, tc.out)
		}
	}
}

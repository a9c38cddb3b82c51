package store

import (
	"errors"
	"testing"
)

// purgeInChunks goes on while a step deletes a whole chunk, and keeps the
// count of the steps before a failure.
func TestPurgeInChunks(t *testing.T) {
	steps := func(ns ...int64) func() (int64, error) {
		return func() (int64, error) {
			if len(ns) == 0 {
				t.Fatal("a step after the last")
			}
			n := ns[0]
			ns = ns[1:]
			if n < 0 {
				return 0, errors.New("disk on fire")
			}
			return n, nil
		}
	}
	if n, err := purgeInChunks(steps(purgeChunk, purgeChunk, 3)); n != 2*purgeChunk+3 || err != nil {
		t.Errorf("three steps: %d, %v; want %d, nil", n, err, 2*purgeChunk+3)
	}
	if n, err := purgeInChunks(steps(0)); n != 0 || err != nil {
		t.Errorf("nothing to purge: %d, %v; want 0, nil", n, err)
	}
	n, err := purgeInChunks(steps(purgeChunk, -1))
	if n != purgeChunk || err == nil || err.Error() != "purge records: disk on fire" {
		t.Errorf("failed second step: %d, %v; want %d, purge records: disk on fire", n, err, purgeChunk)
	}
}

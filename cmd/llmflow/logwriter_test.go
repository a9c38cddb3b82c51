package main

import (
	"bytes"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"
)

type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// TestLogWriter: info lines are written within the delay without a
// write each, warnings at once, and Flush writes what is pending.
func TestLogWriter(t *testing.T) {
	var out lockedBuffer
	lw := newLogWriter(&out, 50*time.Millisecond)
	log := slog.New(flushOnWarn{slog.NewTextHandler(lw, nil), lw})
	log.Info("request", "n", 1)
	log.Info("request", "n", 2)
	if out.String() != "" {
		t.Fatalf("info lines written at once: %q", out.String())
	}
	for deadline := time.Now().Add(10 * time.Second); strings.Count(out.String(), "msg=request") < 2; {
		if time.Now().After(deadline) {
			t.Fatalf("info lines not written after the delay: %q", out.String())
		}
		time.Sleep(5 * time.Millisecond)
	}
	log.With("a", "b").Warn("upstream unreachable")
	if !strings.Contains(out.String(), "upstream unreachable") {
		t.Fatal("a warning was not written at once")
	}
	log.Info("last")
	lw.Flush()
	if !strings.Contains(out.String(), "msg=last") {
		t.Fatal("Flush did not write the pending line")
	}
}

package main

import (
	"bufio"
	"context"
	"io"
	"log/slog"
	"sync"
	"time"
)

// logWriter buffers log lines and writes them out within a delay (or when
// 64 KiB are pending): the access line of every request is not a write
// system call of its own on the request path (as nginx's access_log
// buffer=, flush=). Lines at warn and above are written at once
// (flushOnWarn), and Flush writes the rest when the command ends; a
// killed process loses at most the delay's info lines (never a record:
// those are in the accounting spool).
type logWriter struct {
	mu      sync.Mutex
	bw      *bufio.Writer
	delay   time.Duration
	t       *time.Timer
	pending bool
}

func newLogWriter(w io.Writer, delay time.Duration) *logWriter {
	lw := &logWriter{bw: bufio.NewWriterSize(w, 64<<10), delay: delay}
	lw.t = time.AfterFunc(time.Hour, lw.Flush)
	lw.t.Stop()
	return lw
}

func (lw *logWriter) Write(p []byte) (int, error) {
	lw.mu.Lock()
	defer lw.mu.Unlock()
	n, err := lw.bw.Write(p)
	if !lw.pending && lw.bw.Buffered() > 0 {
		lw.pending = true
		lw.t.Reset(lw.delay)
	}
	return n, err
}

// Flush writes what is pending.
func (lw *logWriter) Flush() {
	lw.mu.Lock()
	defer lw.mu.Unlock()
	lw.bw.Flush()
	lw.pending = false
}

// flushOnWarn writes a record at warn or above out at once.
type flushOnWarn struct {
	slog.Handler
	lw *logWriter
}

func (h flushOnWarn) Handle(ctx context.Context, r slog.Record) error {
	err := h.Handler.Handle(ctx, r)
	if r.Level >= slog.LevelWarn {
		h.lw.Flush()
	}
	return err
}

func (h flushOnWarn) WithAttrs(as []slog.Attr) slog.Handler {
	return flushOnWarn{h.Handler.WithAttrs(as), h.lw}
}

func (h flushOnWarn) WithGroup(name string) slog.Handler {
	return flushOnWarn{h.Handler.WithGroup(name), h.lw}
}

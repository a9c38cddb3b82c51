// Package progress draws the progress of long work (the rows of a
// write-back, the hours a report reads) as one line rewritten in place on
// a terminal: counts, rate and time left. On anything else (a pipe, a
// file, the -P output of scripts) it draws nothing, so what a command
// prints is the same with or without it.
package progress

import (
	"fmt"
	"io"
	"os"
	"sync"
	"time"
)

// every bounds how often the line is drawn.
const every = 100 * time.Millisecond

// Meter counts done out of total units of one task. A nil *Meter draws
// nothing: every method may be called on it.
type Meter struct {
	w           io.Writer
	what, unit  string
	now         func() time.Time
	mu          sync.Mutex
	total, done int64
	start, last time.Time
	shown       bool
	// waiting: the work cannot be counted as it goes (Wait); the line
	// shows the time elapsed only.
	waiting bool
	// ticks makes the ticker of Wait (nil: every tick, from time).
	ticks func() (c <-chan time.Time, stop func())
}

// tick is how often Wait redraws the line, and how long it waits before
// drawing it first: work that ends sooner draws nothing.
const tick = time.Second

// IsTerminal reports whether w is a terminal (a character device: a pipe
// or a file is not).
func IsTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}

// New returns a Meter drawing on w when w is a terminal and on is true
// (false: -P, or the command's own reason), else nil. what names the task
// ("write-back"), unit the things counted ("rows").
func New(w io.Writer, on bool, what, unit string, total int64) *Meter {
	if !on || !IsTerminal(w) {
		return nil
	}
	return newMeter(w, what, unit, total, time.Now)
}

// NewAlways returns a Meter drawing on w whatever w is: for tests of what
// a command draws.
func NewAlways(w io.Writer, what, unit string, total int64) *Meter {
	return newMeter(w, what, unit, total, time.Now)
}

// NewAlwaysTicks is NewAlways whose Wait draws the line at each time
// received from ticks instead of every second: for tests of what a
// command draws while it waits, without waiting.
func NewAlwaysTicks(w io.Writer, what, unit string, total int64, ticks <-chan time.Time) *Meter {
	m := newMeter(w, what, unit, total, time.Now)
	m.ticks = func() (<-chan time.Time, func()) { return ticks, func() {} }
	return m
}

func newMeter(w io.Writer, what, unit string, total int64, now func() time.Time) *Meter {
	t := now()
	return &Meter{w: w, what: what, unit: unit, now: now, total: total, start: t}
}

// Stage starts a new stage of the work, with its own name, unit and
// total (0: unknown): "sync applying", "changes", 12. Its first Set is
// drawn at once.
func (m *Meter) Stage(what, unit string, total int64) {
	if m == nil {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.what, m.unit, m.total, m.done, m.start = what, unit, total, 0, m.now()
	m.last = time.Time{} // the new stage is drawn at its first Set
}

// Wait is for work that cannot be counted as it goes (one database
// query), where a count, rate or time left would be made up: from a
// second on, and every second until stop is called, it draws the line
// with the time elapsed only: "export, one query over 8760 hours: 3s".
// stop returns once the line is no longer drawn; Done clears it.
func (m *Meter) Wait() (stop func()) {
	if m == nil {
		return func() {}
	}
	m.mu.Lock()
	m.waiting, m.start = true, m.now()
	m.mu.Unlock()
	quit, ended := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(ended)
		c, stopTicks := m.ticker()
		defer stopTicks()
		for {
			select {
			case <-quit:
				return
			case <-c:
				m.redraw()
			}
		}
	}()
	return sync.OnceFunc(func() {
		close(quit)
		<-ended
		m.mu.Lock()
		m.waiting = false
		m.mu.Unlock()
	})
}

func (m *Meter) ticker() (<-chan time.Time, func()) {
	if m.ticks != nil {
		return m.ticks()
	}
	t := time.NewTicker(tick)
	return t.C, t.Stop
}

// redraw draws the line now.
func (m *Meter) redraw() {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.draw(m.now())
}

// Total sets the number of units (when it is known late, or changes with
// the stage).
func (m *Meter) Total(what string, total int64) {
	if m == nil {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if what != "" && what != m.what {
		m.what, m.done, m.start = what, 0, m.now()
	}
	m.total = total
}

// Set records done units and draws the line, at most every 100 ms and
// always at the end.
func (m *Meter) Set(done int64) {
	if m == nil {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.done = done
	t := m.now()
	if m.shown && t.Sub(m.last) < every && done < m.total {
		return
	}
	m.draw(t)
}

// draw draws the line at t; m.mu is held.
func (m *Meter) draw(t time.Time) {
	m.last, m.shown = t, true
	fmt.Fprint(m.w, "\r\033[K"+m.line(t))
}

// Add records n more units done.
func (m *Meter) Add(n int64) {
	if m == nil {
		return
	}
	m.mu.Lock()
	done := m.done + n
	m.mu.Unlock()
	m.Set(done)
}

// Done clears the line (what the command prints next starts on a clean
// line).
func (m *Meter) Done() {
	if m == nil {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.shown {
		fmt.Fprint(m.w, "\r\033[K")
		m.shown = false
	}
}

// line is the text drawn at t: "write-back assoc hours: 12000/48000 rows
// (25%), 3000 rows/s, 12s left".
func (m *Meter) line(t time.Time) string {
	if m.waiting {
		return m.what + ": " + t.Sub(m.start).Round(time.Second).String()
	}
	s := fmt.Sprintf("%s: %d", m.what, m.done)
	if m.total > 0 {
		s += fmt.Sprintf("/%d %s (%d%%)", m.total, m.unit, m.done*100/m.total)
	} else {
		s += " " + m.unit
	}
	el := t.Sub(m.start)
	if el <= 0 || m.done == 0 {
		return s
	}
	rate := float64(m.done) / el.Seconds()
	s += fmt.Sprintf(", %.0f %s/s", rate, m.unit)
	if m.total > m.done {
		left := time.Duration(float64(m.total-m.done) / rate * float64(time.Second))
		s += ", " + left.Round(time.Second).String() + " left"
	}
	return s
}

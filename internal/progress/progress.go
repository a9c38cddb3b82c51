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
}

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

func newMeter(w io.Writer, what, unit string, total int64, now func() time.Time) *Meter {
	t := now()
	return &Meter{w: w, what: what, unit: unit, now: now, total: total, start: t}
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

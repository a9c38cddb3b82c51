package progress

import (
	"bytes"
	"os"
	"strings"
	"testing"
	"time"
)

// clock is a settable time for the meter.
type clock struct{ t time.Time }

func (c *clock) now() time.Time { return c.t }

// TestMeterLine: counts, percentage, rate and time left; drawn at most
// every 100 ms, always at the end; Done clears the line.
func TestMeterLine(t *testing.T) {
	c := &clock{t: time.Unix(1000, 0)}
	var b bytes.Buffer
	m := newMeter(&b, "write-back", "rows", 1000, c.now)
	c.t = c.t.Add(2 * time.Second)
	m.Set(250)
	if got, want := b.String(), "\r\033[Kwrite-back: 250/1000 rows (25%), 125 rows/s, 6s left"; got != want {
		t.Fatalf("first line %q, want %q", got, want)
	}
	b.Reset()
	c.t = c.t.Add(50 * time.Millisecond)
	m.Add(10)
	if b.Len() != 0 {
		t.Errorf("drawn again after 50 ms: %q", b.String())
	}
	c.t = c.t.Add(50 * time.Millisecond)
	m.Add(10)
	if !strings.Contains(b.String(), "270/1000 rows (27%)") {
		t.Errorf("after 100 ms: %q", b.String())
	}
	b.Reset()
	m.Set(1000) // the end: drawn at once, nothing left
	if got := b.String(); !strings.Contains(got, "1000/1000 rows (100%)") || strings.Contains(got, "left") {
		t.Errorf("at the end: %q", got)
	}
	b.Reset()
	m.Done()
	if b.String() != "\r\033[K" {
		t.Errorf("Done wrote %q, want the line cleared", b.String())
	}
	m.Total("report", 0) // a new stage, total unknown
	c.t = c.t.Add(time.Second)
	b.Reset()
	m.Set(5)
	if got := b.String(); !strings.HasSuffix(got, "report: 5 rows, 5 rows/s") {
		t.Errorf("unknown total: %q", got)
	}
}

// TestNewOffTerminal: nothing is drawn on a pipe, a buffer or with on
// false, and a nil Meter may be used.
func TestNewOffTerminal(t *testing.T) {
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	defer w.Close()
	for _, tc := range []struct {
		name string
		m    *Meter
	}{
		{"Pipe", New(w, true, "x", "rows", 10)},
		{"Buffer", New(new(bytes.Buffer), true, "x", "rows", 10)},
		{"Off", New(os.Stderr, false, "x", "rows", 10)},
	} {
		if tc.m != nil {
			t.Errorf("%s: a meter", tc.name)
		}
		tc.m.Set(5)
		tc.m.Add(1)
		tc.m.Total("y", 3)
		tc.m.Done()
	}
	if IsTerminal(w) {
		t.Error("a pipe is a terminal")
	}
}

// TestMeterStagesAndWait: a stage has its own name, unit and count; work
// that cannot be counted (Wait) shows the time elapsed only, never a
// count, rate or time left.
func TestMeterStagesAndWait(t *testing.T) {
	for _, tc := range []struct {
		name string
		run  func(m *Meter, c *clock)
		want string
	}{
		{"Stage", func(m *Meter, c *clock) {
			m.Stage("sync applying", "changes", 40)
			c.t = c.t.Add(2 * time.Second)
			m.Set(10)
		}, "\r\033[Ksync applying: 10/40 changes (25%), 5 changes/s, 6s left"},
		{"StageUnknownTotal", func(m *Meter, c *clock) {
			m.Stage("sync reading slurmdbd:hgx", "associations", 0)
			c.t = c.t.Add(time.Second)
			m.Set(1200)
		}, "\r\033[Ksync reading slurmdbd:hgx: 1200 associations, 1200 associations/s"},
		{"Wait", func(m *Meter, c *clock) {
			ticks := make(chan time.Time)
			m.ticks = func() (<-chan time.Time, func()) { return ticks, func() {} }
			stop := m.Wait()
			c.t = c.t.Add(3*time.Second + 400*time.Millisecond)
			ticks <- c.t // a second has passed, and more
			stop()       // returns once the tick is drawn
			stop()       // twice is fine
		}, "\r\033[Kexport, one query over 8760 hours: 3s"},
		{"WaitEndedSoon", func(m *Meter, c *clock) {
			m.ticks = func() (<-chan time.Time, func()) { return nil, func() {} }
			stop := m.Wait()
			stop() // before the first tick: nothing drawn
			m.Done()
		}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := &clock{t: time.Unix(1000, 0)}
			var b bytes.Buffer
			m := newMeter(&b, "export, one query over 8760 hours", "hours", 0, c.now)
			tc.run(m, c)
			if got := b.String(); got != tc.want {
				t.Errorf("drew %q, want %q", got, tc.want)
			}
		})
	}
}

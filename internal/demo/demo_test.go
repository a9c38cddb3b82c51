package demo

import (
	"strings"
	"testing"
)

func TestWritePreemptions(t *testing.T) {
	var b strings.Builder
	writePreemptions(&b, map[int]int64{12: 5, 0: 1, 4: 2}, true)
	want := `
priority  preemptions  meaning
       0            1  within its team's share
       4            2  borrowing from a sibling team
      12            5  borrowing from another institution
`
	if b.String() != want {
		t.Errorf("got\n%s\nwant\n%s", b.String(), want)
	}
	b.Reset()
	writePreemptions(&b, map[int]int64{0: 3}, false)
	if !strings.Contains(b.String(), "control") {
		t.Errorf("control run:\n%s", b.String())
	}
	b.Reset()
	writePreemptions(&b, nil, true)
	if !strings.Contains(b.String(), "no request was preempted") {
		t.Errorf("no preemptions:\n%s", b.String())
	}
}

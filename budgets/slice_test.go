package budgets

import (
	"errors"
	"strings"
	"testing"
	"time"
)

// fill reserves requests of cost GPU-hours (and tokens) under lim on the
// key "key_1" until one is refused, for at most 100, and returns how many
// were admitted (left in flight) and the refusal.
func fill(t *testing.T, m *Mem, now time.Time, cost float64, lim KeyLimits, tokens int64) (int, *Refusal) {
	t.Helper()
	for i := range 100 {
		r := &Request{Slots: m.Table().Chain("org", "team", "proj", "key_1", "", nil).Select("m", nil),
			Key: m.Key("key_1"), Limits: lim, Start: now, PromptCost: cost, Tokens: tokens}
		err := m.Reserve(now, r)
		var rf *Refusal
		if errors.As(err, &rf) {
			return i, rf
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	return 100, nil
}

// TestSliceBudgets: while sliced 1/n, what this gateway itself spends and
// holds on a budget stays within (limit − floor0)/n, floor0 being the
// budget's used when the slice began. The org budget is 10 GPU-hours of
// which the store says 4 are spent; requests cost 0.5.
func TestSliceBudgets(t *testing.T) {
	orgB := func(limit float64) Budget {
		return Budget{Scope: Scope{KindOrg, "org", ""}, Period: Month, MaxCost: limit}
	}
	apply := func(m *Mem, now time.Time, limit, stored float64) {
		m.Apply([]Budget{orgB(limit)}, nil, now)
		m.Refresh(orgB(limit).Scope, Month.Start(now), StoredSpend{Older: stored}, now)
	}
	settle := func(m *Mem, k int, cost float64) {
		for range k {
			r := &Request{Slots: m.Table().Chain("org", "", "", "", "", nil).Select("m", nil), Start: t0, PromptCost: cost}
			if err := m.Reserve(t0, r); err != nil {
				t.Fatal(err)
			}
			m.Settle(t0, r, cost, 0)
		}
	}
	next := time.Date(2027, 1, 1, 10, 0, 0, 0, time.UTC) // the next month
	for _, tc := range []struct {
		name   string
		setup  func(m *Mem) // before the slice (default: limit 10, 4 spent)
		n      int64
		during func(m *Mem)
		at     time.Time
		want   int
		full   bool // refused by the limit itself, not the slice
	}{
		{name: "whole", n: 1, want: 12},
		{name: "a third of what is left", n: 3, want: 4},
		{name: "holds in flight at the start count in floor0", n: 3, setup: func(m *Mem) {
			apply(m, t0, 10, 4)
			if k, _ := fill(t, m, t0, 0.5, KeyLimits{}, 0); k == 0 {
				t.Fatal("nothing admitted")
			}
		}, want: 0, full: true},
		{name: "one held at the start", n: 3, setup: func(m *Mem) {
			apply(m, t0, 10, 4)
			r := &Request{Slots: m.Table().Chain("org", "", "", "", "", nil).Select("m", nil), Start: t0, PromptCost: 1}
			if err := m.Reserve(t0, r); err != nil {
				t.Fatal(err)
			}
		}, want: 3}, // (10 − 5) / 3 = 1.67
		{name: "own charges since the start count", n: 3, during: func(m *Mem) { settle(m, 2, 0.5) }, want: 2},
		{name: "others' spend through the store does not cut the share", n: 3,
			during: func(m *Mem) { m.Refresh(orgB(10).Scope, Month.Start(t0), StoredSpend{Older: 6}, t0) }, want: 4},
		{name: "but the limit holds", n: 3,
			during: func(m *Mem) { m.Refresh(orgB(10).Scope, Month.Start(t0), StoredSpend{Older: 9}, t0) }, want: 2, full: true},
		{name: "limit raised while sliced: same floor0", n: 3, during: func(m *Mem) { apply(m, t0, 16, 4) }, want: 8},
		{name: "limit lowered below floor0", n: 3, during: func(m *Mem) { apply(m, t0, 3, 4) }, want: 0, full: true},
		{name: "in force while sliced: floor0 at its first refresh", n: 3, setup: func(m *Mem) {},
			during: func(m *Mem) { apply(m, t0, 10, 4) }, want: 4},
		{name: "a new period while sliced: floor0 again", n: 3,
			during: func(m *Mem) { apply(m, next, 10, 2.5) }, at: next, want: 5}, // (10 − 2.5) / 3
		{name: "own spend before the first refresh still counts", n: 3,
			setup: func(m *Mem) { m.Apply([]Budget{orgB(10)}, nil, t0) }, // the store not read yet
			during: func(m *Mem) {
				settle(m, 2, 0.5)
				m.Refresh(orgB(10).Scope, Month.Start(t0), StoredSpend{Older: 4}, t0)
			}, want: 2}, // (10 − 4) / 3 − 1
		{name: "the slice ends", n: 3, during: func(m *Mem) { m.SetSlice(1) }, want: 12},
		{name: "n changes: floor0 stays", n: 3, during: func(m *Mem) {
			settle(m, 2, 0.5) // 1 of its 2
			m.SetSlice(2)     // 3 − 1
		}, want: 4},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := NewMem(time.Hour)
			if tc.setup != nil {
				tc.setup(m)
			} else {
				apply(m, t0, 10, 4)
			}
			m.SetSlice(tc.n)
			if m.Slice() != tc.n {
				t.Fatalf("Slice() = %d, want %d", m.Slice(), tc.n)
			}
			if tc.during != nil {
				tc.during(m)
			}
			at := t0
			if !tc.at.IsZero() {
				at = tc.at
			}
			got, rf := fill(t, m, at, 0.5, KeyLimits{}, 0)
			if got != tc.want {
				t.Fatalf("admitted %d of 0.5 GPU-hours, want %d", got, tc.want)
			}
			if rf == nil || rf.Reason != "budget" {
				t.Fatalf("refusal %+v, want budget", rf)
			}
			if note := m.Slice() > 1 && !tc.full; note != strings.Contains(rf.Message, "share") {
				t.Errorf("message %q, want a word of the share: %v", rf.Message, note)
			}
			if st := m.Table().Status(); st[0].EffectiveLimit != st[0].MaxCost {
				t.Errorf("listings show the sliced limit: %+v", st[0])
			}
		})
	}
}

// TestSliceKeyLimits: while sliced 1/n, each key limit is max(1, limit/n)
// and 0 stays unlimited.
func TestSliceKeyLimits(t *testing.T) {
	for _, tc := range []struct {
		lim    KeyLimits
		n      int64
		tokens int64
		want   int
		reason string
	}{
		{KeyLimits{RPM: 10}, 1, 0, 10, "rpm"},
		{KeyLimits{RPM: 10}, 3, 0, 3, "rpm"},
		{KeyLimits{RPM: 2}, 3, 0, 1, "rpm"}, // at least 1: 3 replicas may run 3
		{KeyLimits{TPM: 300}, 3, 50, 2, "tpm"},
		{KeyLimits{MaxInFlight: 7}, 3, 0, 2, "max_inflight"},
		{KeyLimits{MaxInFlight: 7}, 1, 0, 7, "max_inflight"},
		{KeyLimits{RPM: 60, MaxInFlight: 9}, 4, 0, 2, "max_inflight"},
		{KeyLimits{}, 3, 0, 100, ""},
	} {
		m := NewMem(time.Hour)
		m.Apply(nil, nil, t0)
		m.SetSlice(tc.n)
		got, rf := fill(t, m, t0, 0, tc.lim, tc.tokens)
		reason := ""
		if rf != nil {
			reason = rf.Reason
			if strings.Contains(rf.Message, "share") != (tc.n > 1) {
				t.Errorf("%+v 1/%d: message %q", tc.lim, tc.n, rf.Message)
			}
		}
		if got != tc.want || reason != tc.reason {
			t.Errorf("%+v sliced 1/%d: admitted %d (%s), want %d (%s)", tc.lim, tc.n, got, reason, tc.want, tc.reason)
		}
	}
}

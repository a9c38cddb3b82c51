package budgets

import (
	"errors"
	"math/rand/v2"
	"sync"
	"testing"
	"time"
)

var t0 = time.Date(2026, 12, 2, 10, 30, 0, 0, time.UTC) // a Wednesday

func TestPeriodStart(t *testing.T) {
	for _, tc := range []struct {
		p          Period
		at         time.Time
		start, end string
	}{
		{Day, t0, "2026-12-02T00:00:00Z", "2026-12-03T00:00:00Z"},
		{Week, t0, "2026-11-30T00:00:00Z", "2026-12-07T00:00:00Z"},
		{Week, time.Date(2026, 11, 29, 23, 59, 0, 0, time.UTC), "2026-11-23T00:00:00Z", "2026-11-30T00:00:00Z"}, // Sunday
		{Week, time.Date(2026, 11, 30, 0, 0, 0, 0, time.UTC), "2026-11-30T00:00:00Z", "2026-12-07T00:00:00Z"},   // Monday
		{Month, t0, "2026-12-01T00:00:00Z", "2027-01-01T00:00:00Z"},
		{Month, time.Date(2027, 1, 1, 0, 30, 0, 0, time.FixedZone("CET", 3600)), "2026-12-01T00:00:00Z", "2027-01-01T00:00:00Z"}, // 23:30 UTC
		{Day, time.Date(2028, 2, 29, 5, 0, 0, 0, time.UTC), "2028-02-29T00:00:00Z", "2028-03-01T00:00:00Z"},
	} {
		s := tc.p.Start(tc.at)
		if got := s.Format(time.RFC3339); got != tc.start {
			t.Errorf("%s start of %v = %s, want %s", tc.p, tc.at, got, tc.start)
		}
		if got := tc.p.End(s).Format(time.RFC3339); got != tc.end {
			t.Errorf("%s end of %v = %s, want %s", tc.p, tc.at, got, tc.end)
		}
	}
}

func TestValidate(t *testing.T) {
	ok := Budget{Scope: Scope{KindTeam, "lab", ""}, Period: Month, MaxCost: 500, SoftLimit: 400}
	if err := ok.Validate(); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		field string
		mod   func(*Budget)
	}{
		{"kind", func(b *Budget) { b.Kind = "account" }},
		{"name", func(b *Budget) { b.Kind = "user" }}, // a user budget is named "account/user"
		{"name", func(b *Budget) { b.Name = "" }},
		{"name", func(b *Budget) { b.Name = "a\nb" }},
		{"period", func(b *Budget) { b.Period = "year" }},
		{"max_cost", func(b *Budget) { b.MaxCost = -1 }},
		{"max_cost", func(b *Budget) { b.MaxCost = 2e9 }},
		{"soft_limit", func(b *Budget) { b.SoftLimit = -0.5 }},
	} {
		b := ok
		tc.mod(&b)
		var fe *FieldError
		if err := b.Validate(); !errors.As(err, &fe) || fe.Field != tc.field {
			t.Errorf("%+v: got %v, want an error on %s", b, err, tc.field)
		}
	}
	in := Increase{Scope: ok.Scope, Amount: 10, ExpiresAt: t0.Add(time.Hour)}
	if err := in.Validate(t0); err != nil {
		t.Fatal(err)
	}
	for _, bad := range []Increase{
		{Scope: ok.Scope, Amount: 0, ExpiresAt: t0.Add(time.Hour)},
		{Scope: ok.Scope, Amount: 1, ExpiresAt: t0},
		{Scope: ok.Scope, Amount: 1, ExpiresAt: t0.Add(400 * 24 * time.Hour)},
	} {
		if bad.Validate(t0) == nil {
			t.Errorf("%+v accepted", bad)
		}
	}
}

func TestMerge(t *testing.T) {
	admin := []Budget{{Scope: Scope{KindTeam, "a", ""}, Period: Month, MaxCost: 5}}
	slurm := []Budget{
		{Scope: Scope{KindTeam, "a", ""}, Period: Month, MaxCost: 100},
		{Scope: Scope{KindTeam, "b", ""}, Period: Month, MaxCost: 7},
	}
	got := Merge(admin, slurm)
	if len(got) != 2 || got[0].MaxCost != 5 || got[0].Source != SourceAdmin || got[1].Name != "b" || got[1].Source != SourceSlurm {
		t.Fatalf("Merge = %+v", got)
	}
}

// ledger returns a ledger with the budgets applied at t0.
func ledger(t *testing.T, bs ...Budget) *Mem {
	t.Helper()
	m := NewMem(30 * time.Minute)
	m.Apply(bs, nil, t0)
	return m
}

func req(m *Mem, model string, prompt, perTok float64, want int64, tags ...string) *Request {
	c := m.Table().Chain("org", "team", "proj", "key_1", "", tags)
	return &Request{Slots: c.Select(model, nil), Start: t0, PromptCost: prompt, OutputCost: perTok, WantOutput: want}
}

func TestReserveLowersAndRefuses(t *testing.T) {
	m := ledger(t,
		Budget{Scope: Scope{KindOrg, "org", ""}, Period: Month, MaxCost: 100},
		Budget{Scope: Scope{KindTeam, "team", "m"}, Period: Day, MaxCost: 1},
		Budget{Scope: Scope{KindTeam, "team", "other"}, Period: Day, MaxCost: 0},
	)
	r := req(m, "m", 0.2, 0.001, 1000) // wants 0.2 + 1.0
	if len(r.Slots) != 2 {
		t.Fatalf("slots = %d, want 2 (org, team for model m)", len(r.Slots))
	}
	if err := m.Reserve(t0, r); err != nil {
		t.Fatal(err)
	}
	if !r.Lowered || r.Output != 800 {
		t.Fatalf("output %d lowered %v, want 800 true", r.Output, r.Lowered)
	}
	r2 := req(m, "m", 0.0001, 0.001, 10)
	err := m.Reserve(t0, r2)
	var rf *Refusal
	if !errors.As(err, &rf) || rf.Scope != (Scope{KindTeam, "team", "m"}) || !errors.Is(err, ErrExhausted) {
		t.Fatalf("second request: %v, want a refusal naming the team budget for m", err)
	}
	if got := err.Error(); got != `the budget of team "team" (model "m") is exhausted for this day` {
		t.Errorf("message %q", got)
	}
	// The real cost is less than the hold: the rest is available again.
	m.Settle(t0, r, 0.5, 0)
	if err := m.Reserve(t0, r2); err != nil {
		t.Fatalf("after settling: %v", err)
	}
	m.Settle(t0, r2, 0.0001+0.01, 0)
	st := m.Table().Status()
	if st[1].Spent < 0.51 || st[1].Spent > 0.5101 || st[1].Held != 0 {
		t.Errorf("team status %+v", st[1])
	}
	// A model with a zero budget is refused, another model is not.
	if err := m.Reserve(t0, req(m, "other", 0.001, 0, 1)); err == nil {
		t.Error("zero budget admitted")
	}
	if err := m.Reserve(t0, req(m, "third", 0.001, 0, 1)); err != nil {
		t.Error(err)
	}
}

// TestNeverOverspent races many requests on one budget: the charges never
// exceed the limit, and what could be paid for was served.
func TestNeverOverspent(t *testing.T) {
	m := ledger(t, Budget{Scope: Scope{KindKey, "key_1", ""}, Period: Day, MaxCost: 1})
	var wg sync.WaitGroup
	var mu sync.Mutex
	served := 0
	for range 500 {
		wg.Go(func() {
			r := req(m, "m", 0.001, 0.0001, 100) // up to 0.011
			if err := m.Reserve(t0, r); err != nil {
				return
			}
			m.Settle(t0, r, 0.001+float64(r.Output)*0.0001, 0) // uses all it may
			mu.Lock()
			served++
			mu.Unlock()
		})
	}
	wg.Wait()
	st := m.Table().Status()[0]
	if st.Spent > 1 || st.Held != 0 {
		t.Fatalf("spent %v held %v, limit 1", st.Spent, st.Held)
	}
	if st.Spent < 1-0.0011 { // not even the prompt and one token left
		t.Fatalf("spent %v: requests that could be paid for were refused", st.Spent)
	}
	t.Logf("served %d, spent %v", served, st.Spent)
}

func TestIncreaseAndRefresh(t *testing.T) {
	sc := Scope{KindTeam, "team", ""}
	m := NewMem(30 * time.Minute)
	var got []Crossing
	m.OnCrossing = func(c Crossing) { got = append(got, c) }
	b := Budget{Scope: sc, Period: Month, MaxCost: 10, SoftLimit: 8}
	m.Apply([]Budget{b}, []Increase{{Scope: sc, Amount: 5, ExpiresAt: t0.Add(time.Hour)}, {Scope: sc, Amount: 50, ExpiresAt: t0}}, t0)
	// The store has 7 from earlier in the month, 1 in this hour.
	m.Refresh(sc, Month.Start(t0), StoredSpend{Older: 7, Hours: map[time.Time]float64{t0.Truncate(time.Hour): 1}}, t0)
	st := m.Table().Status()[0]
	if st.EffectiveLimit != 15 || st.Spent != 8 {
		t.Fatalf("status %+v, want limit 15 spent 8", st)
	}
	if len(got) != 1 || got[0].Spent != 8 || got[0].PeriodStart != Month.Start(t0) || got[0].BudgetID != "team/team/" {
		t.Fatalf("crossings %+v", got)
	}
	// This gateway charges 2 more; the store has written 0.5 of it so far:
	// the store's 8 before counting began plus this gateway's 2.
	r := req(m, "m", 2, 0, 0)
	if err := m.Reserve(t0, r); err != nil {
		t.Fatal(err)
	}
	m.Settle(t0, r, 2, 0)
	m.Refresh(sc, Month.Start(t0), StoredSpend{Older: 7, Hours: map[time.Time]float64{t0.Truncate(time.Hour): 1.5}}, t0)
	if s := m.Table().Status()[0].Spent; s != 10 {
		t.Fatalf("spent %v, want 8 + 2", s)
	}
	// Another source (a replayed spool) raises the store past that.
	m.Refresh(sc, Month.Start(t0), StoredSpend{Older: 7, Hours: map[time.Time]float64{t0.Truncate(time.Hour): 4}}, t0)
	if s := m.Table().Status()[0].Spent; s != 11 {
		t.Fatalf("spent %v, want the store's 11", s)
	}
	if len(got) != 1 {
		t.Fatalf("crossed again in the same period: %+v", got)
	}
	// Next month: the store's figures alone, and a new crossing possible.
	next := Month.End(Month.Start(t0)).Add(time.Hour)
	m.Apply([]Budget{b}, nil, next)
	m.Refresh(sc, Month.Start(next), StoredSpend{Hours: map[time.Time]float64{}}, next)
	if st := m.Table().Status()[0]; st.Spent != 0 || st.EffectiveLimit != 10 {
		t.Fatalf("next month %+v", st)
	}
	// The slot existed at the month's start: a charge written to the
	// store counts once.
	r = &Request{Slots: m.Table().Chain("org", "team", "p", "k", "", nil).Select("m", nil), Start: next, PromptCost: 9}
	if err := m.Reserve(next, r); err != nil {
		t.Fatal(err)
	}
	m.Settle(next, r, 9, 0)
	m.Refresh(sc, Month.Start(next), StoredSpend{Hours: map[time.Time]float64{next.Truncate(time.Hour): 9}}, next)
	if st := m.Table().Status()[0]; st.Spent != 9 {
		t.Fatalf("next month after a written charge: %+v", st)
	}
	if len(got) != 2 || got[1].PeriodStart != Month.Start(next) {
		t.Fatalf("crossings %+v, want a second one in the new month", got)
	}
}

func TestKeyLimits(t *testing.T) {
	m := NewMem(time.Hour)
	k := m.Key("key_1")
	lim := KeyLimits{RPM: 3, TPM: 100, MaxInFlight: 2}
	r := func(tokens int64) *Request { return &Request{Key: k, Limits: lim, Tokens: tokens, Start: t0} }
	a, b := r(10), r(10)
	if m.Reserve(t0, a) != nil || m.Reserve(t0, b) != nil {
		t.Fatal("first two refused")
	}
	var rf *Refusal
	if err := m.Reserve(t0, r(10)); !errors.As(err, &rf) || rf.Reason != "max_inflight" {
		t.Fatalf("third in flight: %v", err)
	}
	m.Settle(t0, a, 0, 10)
	c := r(10)
	if err := m.Reserve(t0.Add(10*time.Second), c); err != nil {
		t.Fatal(err)
	}
	m.Settle(t0, b, 0, 10)
	m.Settle(t0, c, 0, 10)
	err := m.Reserve(t0.Add(20*time.Second), r(10))
	if !errors.As(err, &rf) || rf.Reason != "rpm" || rf.RetryAfter != 40*time.Second {
		t.Fatalf("fourth in a minute: %v %+v", err, rf)
	}
	if k.InFlight() != 0 {
		t.Fatalf("in flight %d after refusals", k.InFlight())
	}
	// A minute after the first two, one slot is back.
	d := r(75)
	if err := m.Reserve(t0.Add(60*time.Second), d); err != nil {
		t.Fatal(err)
	}
	// The window holds 10 (c) + 75: 20 more tokens do not fit.
	if err := m.Reserve(t0.Add(61*time.Second), &Request{Key: k, Limits: KeyLimits{TPM: 100}, Tokens: 20}); !errors.As(err, &rf) || rf.Reason != "tpm" {
		t.Fatalf("tpm: %v", err)
	}
	m.Settle(t0.Add(61*time.Second), d, 0, 5) // used 5, not 75
	if err := m.Reserve(t0.Add(62*time.Second), &Request{Key: k, Limits: KeyLimits{TPM: 100}, Tokens: 20}); err != nil {
		t.Fatalf("after reconcile: %v", err)
	}
}

// TestWindowModel checks the running-total window against a brute-force
// count of the events of the last 60 seconds, over random times (steps of
// 0 to 90 s, and a clock going back).
func TestWindowModel(t *testing.T) {
	type ev struct{ sec, n int64 }
	rng := rand.New(rand.NewPCG(1, 2))
	var w window
	var evs []ev
	now := int64(1_000_000)
	for i := range 20000 {
		switch r := rng.IntN(20); {
		case r == 0:
			now += int64(rng.IntN(90))
		case r < 8:
			now++
		case r == 8:
			now -= 3 // a clock going back: the window stays where it is
		}
		w.advance(now)
		at := w.last
		n := int64(1 + rng.IntN(5))
		w.add(at, n)
		evs = append(evs, ev{at, n})
		var want int64
		kept := evs[:0]
		for _, e := range evs {
			if e.sec > w.last-windowSecs {
				kept = append(kept, e)
			}
		}
		evs = kept
		for _, e := range evs {
			if e.sec > w.last-windowSecs && e.sec <= w.last {
				want += e.n
			}
		}
		if w.total != want {
			t.Fatalf("step %d at %d: total %d, want %d", i, w.last, w.total, want)
		}
		if wait := w.wait(now, 1, want); wait == 0 || wait > windowSecs*time.Second {
			t.Fatalf("step %d: wait %v for a full window", i, wait)
		}
	}
}

// TestCancel: a cancelled reservation leaves nothing: no hold, no spend,
// no in-flight slot and no count in the key's windows (RPM and TPM), so
// the limits admit as if it had never been made.
func TestCancel(t *testing.T) {
	m := ledger(t, Budget{Scope: Scope{KindOrg, "org", ""}, Period: Day, MaxCost: 1})
	k := m.Key("key_1")
	lim := KeyLimits{RPM: 1, TPM: 10, MaxInFlight: 1}
	r := req(m, "m", 0.9, 0, 0)
	r.Key, r.Limits, r.Tokens = k, lim, 10
	if err := m.Reserve(t0, r); err != nil {
		t.Fatal(err)
	}
	m.Cancel(r)
	if st := m.Table().Status()[0]; st.Held != 0 || st.Spent != 0 || k.InFlight() != 0 {
		t.Fatalf("after cancel: %+v, key in flight %d", st, k.InFlight())
	}
	r2 := req(m, "m", 0.9, 0, 0)
	r2.Key, r2.Limits, r2.Tokens = k, lim, 10
	if err := m.Reserve(t0, r2); err != nil {
		t.Fatalf("the same request again, within the minute: %v", err)
	}
}

// TestCheck: Check refuses as Reserve would (budget, max_inflight, rpm),
// with the same message, and takes nothing.
func TestCheck(t *testing.T) {
	m := ledger(t, Budget{Scope: Scope{KindOrg, "org", ""}, Period: Day, MaxCost: 1})
	k := m.Key("key_1")
	lim := KeyLimits{RPM: 2, MaxInFlight: 1}
	mk := func(cost float64) *Request {
		r := req(m, "m", cost, 0, 0)
		r.Key, r.Limits = k, lim
		return r
	}
	if err := m.Check(t0, mk(0.5)); err != nil {
		t.Fatal(err)
	}
	if st := m.Table().Status()[0]; st.Held != 0 || k.InFlight() != 0 {
		t.Fatalf("Check took something: %+v, in flight %d", st, k.InFlight())
	}
	a := mk(0.5)
	if err := m.Reserve(t0, a); err != nil {
		t.Fatal(err)
	}
	var rf *Refusal
	if err := m.Check(t0, mk(0.1)); !errors.As(err, &rf) || rf.Reason != "max_inflight" {
		t.Fatalf("in flight: %v", err)
	}
	m.Settle(t0, a, 0.5, 0)
	b := mk(0.5)
	want := m.Reserve(t0, b) // the rpm's second, and the budget's last 0.5
	if want != nil {
		t.Fatal(want)
	}
	m.Settle(t0, b, 0.5, 0)
	errC, errR := m.Check(t0, mk(0.1)), m.Reserve(t0, mk(0.1))
	if errC == nil || errR == nil || errC.Error() != errR.Error() {
		t.Fatalf("Check %v, Reserve %v: want the same refusal", errC, errR)
	}
	// the budget alone
	m2 := ledger(t, Budget{Scope: Scope{KindOrg, "org", ""}, Period: Day, MaxCost: 0.1})
	errC, errR = m2.Check(t0, req(m2, "m", 0.2, 0, 0)), m2.Reserve(t0, req(m2, "m", 0.2, 0, 0))
	if !errors.Is(errC, ErrExhausted) || errC.Error() != errR.Error() {
		t.Fatalf("Check %v, Reserve %v", errC, errR)
	}
}

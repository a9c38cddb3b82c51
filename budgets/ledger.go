package budgets

import (
	"fmt"
	"math"
	"sync"
	"sync/atomic"
	"time"
)

// unitsPerGPUHour is the resolution of the counters: nano GPU-hours, in
// int64 (up to 9.2e9 GPU-hours), so that holds are single atomic words.
const unitsPerGPUHour = 1e9

// units converts GPU-hours to counter units, rounding up: a hold or a
// charge is never smaller than its cost.
func units(gh float64) int64 {
	if !(gh > 0) {
		return 0
	}
	// Relative slack of 1e-12 absorbs float noise (0.1+0.2), so that a
	// cost computed in another order than its hold rounds alike.
	u := math.Ceil(gh * unitsPerGPUHour * (1 - 1e-12))
	if u >= math.MaxInt64/4 {
		return math.MaxInt64 / 4
	}
	return int64(u)
}

// floorUnits converts a limit to counter units, rounding down.
func floorUnits(gh float64) int64 {
	if !(gh > 0) {
		return 0
	}
	u := math.Floor(gh * unitsPerGPUHour)
	if u >= math.MaxInt64/4 {
		return math.MaxInt64 / 4
	}
	return int64(u)
}

func gpuHours(u int64) float64 { return float64(u) / unitsPerGPUHour }

// KeyLimits are a key's per-minute and concurrency limits; 0 = unlimited.
type KeyLimits struct {
	RPM, TPM, MaxInFlight int
}

// Any reports whether any limit is set.
func (l KeyLimits) Any() bool { return l.RPM > 0 || l.TPM > 0 || l.MaxInFlight > 0 }

// share returns one replica's 1/n share of a key limit v (n ≤ 1: v): v/n
// rounded down but at least 1 (so a limit below n lets n replicas
// together run up to n − v more than it); 0 stays unlimited.
func share(v int, n int64) int64 {
	l := int64(v)
	if n > 1 && l > 0 {
		l = max(l/n, 1)
	}
	return l
}

// sliceNote is added to a refusal's message while the ledger is sliced.
func sliceNote(n int64, whole int) string {
	if n <= 1 {
		return ""
	}
	return fmt.Sprintf(" (this replica's 1/%d share of %d while the replicas cannot share the count)", n, whole)
}

// Request is one admission as the ledger sees it. The caller fills the
// inputs; Reserve fills the outputs, and Settle reads both. It is meant to
// live inside the caller's per-request state, so admission allocates
// nothing.
type Request struct {
	Slots  []*Slot   // the budgets the request falls under
	Key    *KeyState // nil = no per-key state (no limits)
	Limits KeyLimits
	Start  time.Time // when the request arrived: its spend counts in this hour

	PromptCost float64 // GPU-hours of the prompt, an upper estimate
	OutputCost float64 // GPU-hours per output token
	WantOutput int64   // output tokens asked for (0: an embedding)
	Tokens     int64   // tokens counted in the TPM window at admission

	// Output is the output limit granted: WantOutput, or less when a
	// budget could not pay for all of it (Lowered).
	Output  int64
	Lowered bool

	// Sec is the rate-window second the request was counted in:
	// Reserve sets it, Settle reconciles the request's tokens there.
	Sec int64

	held     int64 // units held on each slot
	inflight bool
	window   bool
}

// Held returns the GPU-hours held on each of the request's budgets.
func (r *Request) Held() float64 { return gpuHours(r.held) }

// Refusal says why a request may not run now.
type Refusal struct {
	Reason     string // "budget", "rpm", "tpm", "max_inflight"
	Scope      Scope  // the exhausted budget's scope (Reason "budget")
	RetryAfter time.Duration
	Message    string
	// Of a budget refusal: Held, requests in flight hold part of the
	// exhausted budget (one that settles for less than its hold may leave
	// enough); Reset, when its period ends and the budget starts afresh.
	Held  bool
	Reset time.Time
}

func (e *Refusal) Error() string { return e.Message }

// Unwrap lets errors.Is(err, ErrExhausted) find budget refusals.
func (e *Refusal) Unwrap() error {
	if e.Reason == "budget" {
		return ErrExhausted
	}
	return nil
}

// Slot is the live state of one budget: its effective limit in force and
// what is spent and held against it. Slots outlive budget changes (a
// budget set again keeps its spend and the holds in flight).
//
// Spent is max(stored, base + local): stored is the store's spend of the
// period at the last refresh, local what this gateway charged in the
// period, base the store's spend before this gateway began counting the
// period (0 when the slot existed at the period's start, else the store's
// figure at the first refresh). With one gateway that is exact whether or
// not its records are written yet (stored − base ≤ local); records of
// another source (a restart's spool, another replica) raise stored.
type Slot struct {
	// What a request touches, together: admissions read cap and used
	// and take with used and held; settles move used, held and spent.
	limit  atomic.Int64 // effective limit, units
	cap    atomic.Int64 // what admissions check used against: limit, or less while sliced
	used   atomic.Int64 // spent + held: the one word admissions check
	held   atomic.Int64
	spent  atomic.Int64
	soft   atomic.Int64 // units; 0 = none
	active atomic.Bool
	// shared is the budget's used (spent + held, every replica's) in the
	// ledger the replicas share, at this gateway's last reservation
	// there (SetShared); 0 = none this period. A slice counts from it.
	shared atomic.Int64

	mu      sync.Mutex
	scope   Scope
	id      string
	created time.Time
	period  Period
	start   time.Time // of the period in force
	base    Budget
	maxCost float64
	incr    float64
	ring    []hourAmount // this gateway's charges per hour, recent hours
	local   int64        // this gateway's charges in the period
	stored  int64        // the store's spend of the period at the last refresh
	origin  int64        // the store's spend before this gateway counted the period
	hasBase bool
	alerted time.Time

	// The slice (Mem.SetSlice), s.mu held: 0 or the divisor n; floor0,
	// used (spent + held) when it began; own0, this gateway's charges
	// and holds then (local + held); refreshed, the store's figure of the
	// period came since it came into force; fresh, the slice began before
	// that (floor0 is taken again at the first refresh).
	sliceN    int64
	floor0    int64
	own0      int64
	refreshed bool
	fresh     bool
}

type hourAmount struct {
	hour int64 // unix seconds of the hour's start
	amt  int64
}

// Scope returns the slot's scope.
func (s *Slot) Scope() Scope { return s.scope }

// take holds h units if the limit allows it.
func (s *Slot) take(h int64) bool {
	for {
		u := s.used.Load()
		if u+h > s.cap.Load() {
			return false
		}
		if s.used.CompareAndSwap(u, u+h) {
			s.held.Add(h)
			return true
		}
	}
}

func (s *Slot) untake(h int64) {
	s.held.Add(-h)
	s.used.Add(-h)
}

// KeyState is one key's in-flight count and rate windows.
type KeyState struct {
	id       string
	inflight atomic.Int64
	mu       sync.Mutex
	reqs     window
	toks     window
}

const windowSecs = 60

// window is a sliding 60 s window of 1 s buckets with a running total:
// an admission touches the total and one bucket (the seconds that left
// the window since the last one are taken out as time advances), not the
// 60 buckets, which would be 15 cache lines per window per request.
type window struct {
	total   int64
	last    int64 // the second the window was advanced to
	buckets [windowSecs]bucket
}

type bucket struct {
	sec int64
	n   int64
}

// InFlight returns the key's requests in flight.
func (k *KeyState) InFlight() int64 { return k.inflight.Load() }

// advance moves the window to second now, taking out the buckets that
// left it. A clock going back leaves the window where it is.
func (w *window) advance(now int64) {
	if now <= w.last {
		return
	}
	if now-w.last >= windowSecs {
		w.buckets, w.total = [windowSecs]bucket{}, 0
	} else {
		for sec := w.last + 1; sec <= now; sec++ {
			b := &w.buckets[sec%windowSecs]
			if b.sec != sec {
				w.total -= b.n // a second that left the window
				*b = bucket{sec: sec}
			}
		}
	}
	w.last = now
}

// wait reports how long until the window holds at most limit-need, at
// second now (0: it does now): the Retry-After of a refusal.
func (w *window) wait(now, need, limit int64) time.Duration {
	w.advance(now)
	if w.total+need <= limit {
		return 0
	}
	left := w.total
	for sec := w.last - windowSecs + 1; sec <= w.last; sec++ {
		if b := &w.buckets[sec%windowSecs]; b.sec == sec {
			left -= b.n
			if left+need <= limit {
				return time.Duration(sec+windowSecs-w.last) * time.Second
			}
		}
	}
	return windowSecs * time.Second
}

// add counts n at second sec, when that second is still in the window.
func (w *window) add(sec, n int64) {
	if sec <= w.last-windowSecs || sec > w.last {
		return
	}
	b := &w.buckets[sec%windowSecs]
	if b.sec != sec { // cleared by a long idle: its count is out of the total already
		*b = bucket{sec: sec}
	}
	b.n += n
	w.total += n
}

// Mem is the ledger of one gateway: atomics per budget (one
// compare-and-swap per budget per admission), a mutex per key for its
// rate windows, nothing global on the request path.
type Mem struct {
	// OnCrossing is called (outside any lock) when a budget's spend
	// reaches its soft limit for the first time in a period in this
	// process. Set before use; nil = none.
	OnCrossing func(Crossing)

	recentHours int64
	// slice is the divisor of every limit (SetSlice); 0 or 1: none.
	slice atomic.Int64

	mu    sync.Mutex
	slots map[Scope]*Slot
	keys  sync.Map // key ID → *KeyState
	table atomic.Pointer[Table]
	gen   atomic.Uint64
}

// NewMem returns an empty ledger. recent is how far back this gateway
// keeps its own charges per hour (at least the longest a request may run,
// plus an hour): when a budget's period changes (a new day, or another
// period kind), its charges of the new period are counted from them.
func NewMem(recent time.Duration) *Mem {
	h := max(int64((recent+time.Hour-1)/time.Hour)+1, 2)
	m := &Mem{recentHours: h, slots: make(map[Scope]*Slot)}
	m.table.Store(&Table{slots: map[Scope]*Slot{}})
	return m
}

// RecentFrom is the start of the recent hours at now: stores report the
// spend per hour from there (StoredSpend.Hours), as one sum before it.
func (m *Mem) RecentFrom(now time.Time) time.Time {
	h := now.UTC().Truncate(time.Hour)
	return h.Add(-time.Duration(m.recentHours-1) * time.Hour)
}

// Key returns the state of the key with the given ID.
func (m *Mem) Key(id string) *KeyState {
	if v, ok := m.keys.Load(id); ok {
		return v.(*KeyState)
	}
	v, _ := m.keys.LoadOrStore(id, &KeyState{id: id})
	return v.(*KeyState)
}

// Table returns the budgets in force.
func (m *Mem) Table() *Table { return m.table.Load() }

// SetSlice makes the ledger enforce one replica's 1/n slice of every
// limit, for a gateway that is one of n replicas keeping alone what they
// normally share (a shared ledger's fallback while its store is away);
// n ≤ 1 ends the slice. While sliced:
//
//   - each key limit (RPM, TPM, max_inflight) is max(1, limit/n): a limit
//     below n lets the replicas together exceed it by up to n − limit;
//   - on each budget, this gateway's own charges and holds since the
//     slice began may not exceed (limit − floor0)/n, where floor0 is the
//     budget's used (spent + held) when the slice began: its effective
//     limit is floor0 + (limit − floor0)/n, raised by the spend of others
//     that reaches this gateway through Refresh (never above the limit).
//     For a budget that comes into force, or enters a new period, while
//     sliced, floor0 is taken at its first refresh; when its limit
//     changes, floor0 stays and the new limit is divided.
//
// So n replicas together never spend more than what was left when the
// slice began (holds of other replicas then in flight, and spend not yet
// in the store, are the residual risk). Changing n while sliced keeps
// each budget's floor0.
func (m *Mem) SetSlice(n int64) {
	n = max(n, 1)
	m.mu.Lock()
	defer m.mu.Unlock()
	if max(m.slice.Load(), 1) == n {
		return
	}
	m.slice.Store(n)
	for _, s := range m.slots {
		s.mu.Lock()
		s.setSlice(n)
		s.mu.Unlock()
	}
}

// Slice returns the divisor in force (1: the whole limits).
func (m *Mem) Slice() int64 { return max(m.slice.Load(), 1) }

// setSlice puts the slot under a 1/n slice (n ≤ 1: none). s.mu is held.
func (s *Slot) setSlice(n int64) {
	switch {
	case n <= 1:
		s.sliceN = 0
	case s.sliceN == 0:
		s.sliceN = n
		s.baseline()
	default:
		s.sliceN = n
	}
	s.recap()
}

// baseline takes the figures the slice counts from: used, at least
// what the shared ledger last said it was (the holds of every replica in
// flight then, and spend not in the store yet, count). s.mu is held.
func (s *Slot) baseline() {
	h := s.held.Load() // used is spent + held; spent moves under s.mu only
	s.floor0, s.own0, s.fresh = max(s.spent.Load()+h, s.shared.Load()), s.local+h, !s.refreshed
}

// recap sets what admissions check used against: the limit or, sliced,
// min(limit, spent − local + own0 + (limit − floor0)/n), so that an
// admission of h fits when local + held + h ≤ own0 + (limit − floor0)/n
// (this gateway's own consumption since the slice began) and used + h ≤
// limit. s.mu is held.
func (s *Slot) recap() {
	l := s.limit.Load()
	if n := s.sliceN; n > 1 {
		l = min(l, s.spent.Load()-s.local+s.own0+(l-s.floor0)/n)
	}
	s.cap.Store(l)
}

// Reserve takes the request's place: its key's in-flight slot and
// rate-window share, and a hold of its maximum cost on each of r.Slots,
// lowering r.Output when a budget cannot pay for all of r.WantOutput. It
// returns a *Refusal, having taken nothing, when the request may not run.
func (m *Mem) Reserve(now time.Time, r *Request) error {
	r.Output, r.Lowered, r.held, r.inflight, r.window = r.WantOutput, false, 0, false, false
	if k := r.Key; k != nil {
		n := m.slice.Load()
		if lim := share(r.Limits.MaxInFlight, n); lim > 0 {
			if k.inflight.Add(1) > lim {
				k.inflight.Add(-1)
				return inFlightRefusal(lim, n, r)
			}
		} else {
			k.inflight.Add(1)
		}
		r.inflight = true
		if r.Limits.RPM > 0 || r.Limits.TPM > 0 {
			if err := m.window(now, r, n); err != nil {
				m.undo(r)
				return err
			}
		}
	}
	if len(r.Slots) > 0 {
		if err := m.hold(r); err != nil {
			m.undo(r)
			return err
		}
	}
	return nil
}

// window counts the request in its key's rate windows, under its limits
// or their 1/n share.
func (m *Mem) window(now time.Time, r *Request, n int64) error {
	k, sec := r.Key, now.Unix()
	k.mu.Lock()
	defer k.mu.Unlock()
	if rf := windowRefusal(k, sec, r, n); rf != nil {
		return rf
	}
	k.reqs.advance(sec)
	k.toks.advance(sec)
	sec = k.reqs.last // a clock gone back counts in the latest second
	k.reqs.add(sec, 1)
	k.toks.add(sec, r.Tokens)
	r.Sec, r.window = sec, true
	return nil
}

// inFlightRefusal is the refusal of r by its key's in-flight limit lim
// (its 1/n share).
func inFlightRefusal(lim, n int64, r *Request) *Refusal {
	return &Refusal{Reason: "max_inflight", RetryAfter: time.Second,
		Message: fmt.Sprintf("the key has %d requests in flight, its limit (max_inflight)", lim) + sliceNote(n, r.Limits.MaxInFlight)}
}

// windowRefusal is the refusal of r by its key's rate windows at second
// sec, under its limits or their 1/n share; nil when they admit it. k.mu
// is held.
func windowRefusal(k *KeyState, sec int64, r *Request, n int64) *Refusal {
	if lim := share(r.Limits.RPM, n); lim > 0 {
		if wait := k.reqs.wait(sec, 1, lim); wait > 0 {
			return &Refusal{Reason: "rpm", RetryAfter: wait,
				Message: fmt.Sprintf("the key's limit of %d requests per minute is reached", lim) + sliceNote(n, r.Limits.RPM)}
		}
	}
	if lim := share(r.Limits.TPM, n); lim > 0 {
		if wait := k.toks.wait(sec, min(r.Tokens, lim), lim); wait > 0 {
			return &Refusal{Reason: "tpm", RetryAfter: wait,
				Message: fmt.Sprintf("the key's limit of %d tokens per minute is reached", lim) + sliceNote(n, r.Limits.TPM)}
		}
	}
	return nil
}

// Check returns the refusal Reserve would give r at now, taking nothing:
// what its key's limits and its budgets in this ledger leave cannot admit
// it. nil does not admit r: only Reserve (or a shared admission) decides,
// atomically. A gateway calls it to refuse at once a request that would
// otherwise wait in a queue before being refused. It does not allocate
// unless it refuses.
func (m *Mem) Check(now time.Time, r *Request) error {
	n := m.slice.Load()
	if k := r.Key; k != nil {
		if lim := share(r.Limits.MaxInFlight, n); lim > 0 && k.inflight.Load() >= lim {
			return inFlightRefusal(lim, n, r)
		}
		if r.Limits.RPM > 0 || r.Limits.TPM > 0 {
			k.mu.Lock()
			rf := windowRefusal(k, now.Unix(), r, n)
			k.mu.Unlock()
			if rf != nil {
				return rf
			}
		}
	}
	if len(r.Slots) > 0 {
		avail, tight := int64(math.MaxInt64), r.Slots[0]
		for _, s := range r.Slots {
			if a := s.cap.Load() - s.used.Load(); a < avail {
				avail, tight = a, s
			}
		}
		if avail < units(r.PromptCost+r.OutputCost*float64(min(r.WantOutput, 1))) {
			return tight.refusal()
		}
	}
	return nil
}

// hold holds the request's maximum cost on every slot, lowering the
// output when the tightest budget cannot pay for all of it.
func (m *Mem) hold(r *Request) error {
	prompt := units(r.PromptCost)
	per := r.OutputCost * unitsPerGPUHour
	minOut := min(r.WantOutput, 1)
	cost := func(out int64) int64 { return units(r.PromptCost + r.OutputCost*float64(out)) }
	var tight *Slot
	for range 16 {
		avail := int64(math.MaxInt64)
		for _, s := range r.Slots {
			if a := s.cap.Load() - s.used.Load(); a < avail {
				avail, tight = a, s
			}
		}
		if avail < cost(minOut) {
			break
		}
		out := r.WantOutput
		if per > 0 {
			if afford := int64(float64(avail-prompt) / per); afford < out {
				out = afford
			}
		}
		h := cost(out)
		for h > avail && out > minOut { // rounding
			out--
			h = cost(out)
		}
		ok := true
		for i, s := range r.Slots {
			if !s.take(h) {
				for _, t := range r.Slots[:i] {
					t.untake(h)
				}
				ok = false
				break
			}
		}
		if ok {
			r.held, r.Output, r.Lowered = h, out, out < r.WantOutput
			return nil
		}
	}
	return tight.refusal()
}

// refusal is the refusal of a request by the budget of s.
func (s *Slot) refusal() *Refusal {
	_, end := s.Period()
	return &Refusal{Reason: "budget", Scope: s.scope, Message: s.exhausted(), Held: s.held.Load() > 0, Reset: end}
}

// exhausted is the message of a budget refusal on s.
func (s *Slot) exhausted() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	msg := fmt.Sprintf("the budget of %s is exhausted for this %s", s.scope, s.period)
	if s.sliceN > 1 && s.cap.Load() < s.limit.Load() {
		msg += fmt.Sprintf(" (this replica's 1/%d share of what was left while the replicas cannot share the count)", s.sliceN)
	}
	return msg
}

// undo gives back what a refused Reserve took.
func (m *Mem) undo(r *Request) {
	if r.window {
		k := r.Key
		k.mu.Lock()
		k.reqs.add(r.Sec, -1)
		k.toks.add(r.Sec, -r.Tokens)
		k.mu.Unlock()
		r.window = false
	}
	if r.inflight {
		r.Key.inflight.Add(-1)
		r.inflight = false
	}
}

// Cancel gives back everything a successful Reserve of r took, charging
// nothing: its holds, its key's in-flight slot and its rate-window counts,
// as if it had never been made. It is for a request that a later check of
// the same admission refuses (an account's cap): all or nothing. It
// replaces Settle.
func (m *Mem) Cancel(r *Request) {
	m.undo(r)
	if r.held != 0 {
		for _, s := range r.Slots {
			s.untake(r.held)
		}
		r.held = 0
	}
}

// Settle gives back what Reserve took and charges the real cost
// (GPU-hours) and tokens. It must be called exactly once after a
// successful Reserve.
func (m *Mem) Settle(now time.Time, r *Request, cost float64, tokens int64) {
	if r.window {
		k := r.Key
		k.mu.Lock()
		k.toks.add(r.Sec, tokens-r.Tokens) // reconcile; a second gone from the window stays gone
		k.mu.Unlock()
		r.window = false
	}
	if r.inflight {
		r.Key.inflight.Add(-1)
		r.inflight = false
	}
	if len(r.Slots) == 0 {
		return
	}
	c := units(cost)
	hour := r.Start.UTC().Truncate(time.Hour).Unix()
	for _, s := range r.Slots {
		if x := s.charge(hour, c, r.held, now); x != nil && m.OnCrossing != nil {
			m.OnCrossing(*x)
		}
	}
	r.held = 0
}

// charge replaces a hold of h units by a charge of c units to hour, and
// reports a soft-limit crossing.
func (s *Slot) charge(hour, c, h int64, now time.Time) *Crossing {
	s.mu.Lock()
	if s.start.IsZero() || hour >= s.start.Unix() {
		i := (hour / 3600) % int64(len(s.ring))
		if e := &s.ring[i]; e.hour == hour {
			e.amt += c
		} else if e.hour < hour {
			*e = hourAmount{hour: hour, amt: c}
		}
		s.local += c
	}
	after := s.settleSpent()
	if s.sliceN > 1 {
		s.recap() // before the hold goes: never a moment too generous
	}
	s.used.Add(-h)
	s.held.Add(-h)
	x := s.crossed(after, now)
	s.mu.Unlock()
	return x
}

// settleSpent sets spent to max(stored, base + local), moving used by the
// difference, and returns it. s.mu is held; while sliced, the caller
// then recaps (kept out of here so that it inlines in charge).
func (s *Slot) settleSpent() int64 {
	v := max(s.stored, s.origin+s.local)
	before := s.spent.Swap(v)
	s.used.Add(v - before)
	return v
}

// crossed reports the spend after a change reaching the soft limit, once
// per period. s.mu is held.
func (s *Slot) crossed(after int64, now time.Time) *Crossing {
	soft := s.soft.Load()
	if soft <= 0 || after < soft || !s.active.Load() || s.alerted.Equal(s.start) {
		return nil
	}
	s.alerted = s.start
	return &Crossing{
		BudgetID: ID(s.scope), Kind: s.scope.Kind, Name: s.scope.Name, Model: s.scope.Model,
		Period: s.period, PeriodStart: s.start, Limit: gpuHours(s.limit.Load()), SoftLimit: s.base.SoftLimit,
		Spent: gpuHours(after), At: now.UTC(),
	}
}

// StoredSpend is a budget's spend as the store has it: Older, the
// GPU-hours of the period before the recent hours (Mem.RecentFrom), and
// Hours, the GPU-hours of each recent hour (by the hour's start, UTC).
type StoredSpend struct {
	Older float64
	Hours map[time.Time]float64
}

// Total returns the GPU-hours of the whole period.
func (st StoredSpend) Total() float64 {
	t := st.Older
	for _, v := range st.Hours {
		t += v
	}
	return t
}

// Refresh sets the stored spend of the budget on scope, read at now for
// the period starting at periodStart (the one Apply put in force; a
// figure for another period is ignored).
func (m *Mem) Refresh(sc Scope, periodStart time.Time, st StoredSpend, now time.Time) {
	m.mu.Lock()
	s := m.slots[sc]
	m.mu.Unlock()
	if s == nil {
		return
	}
	s.mu.Lock()
	if !s.start.Equal(periodStart) {
		s.mu.Unlock()
		return
	}
	total := units(st.Total())
	if !s.hasBase {
		// Counting began mid-period: what the store had then is the
		// base (this gateway's records written by now count twice,
		// erring on the safe side, until the period ends).
		s.origin, s.hasBase = total, true
	}
	s.stored = total
	after := s.settleSpent()
	s.refreshed = true
	if s.sliceN > 1 {
		if s.fresh {
			// Sliced since before the store's figure of the period was
			// known: floor0 is taken again with it, what this gateway
			// spent and held since the baseline still counting.
			s.floor0, s.fresh = s.spent.Load()-s.local+s.own0, false
		}
		s.recap()
	}
	x := s.crossed(after, now)
	s.mu.Unlock()
	if x != nil && m.OnCrossing != nil {
		m.OnCrossing(*x)
	}
}

// Apply puts budgets in force with their increases, at now: a new Table.
// Slots of budgets that remain keep their spend and holds; a budget no
// longer in the list stops refusing at once.
func (m *Mem) Apply(bs []Budget, incs []Increase, now time.Time) *Table {
	extra := map[Scope]float64{}
	for _, in := range incs {
		if in.ExpiresAt.After(now) {
			extra[in.Scope] += in.Amount
		}
	}
	t := &Table{gen: m.gen.Add(1), slots: make(map[Scope]*Slot, len(bs)), byName: make(map[kindName][]chainEntry, len(bs))}
	m.mu.Lock()
	for _, b := range bs {
		s := m.slots[b.Scope]
		if s == nil {
			s = &Slot{scope: b.Scope, id: ID(b.Scope), ring: make([]hourAmount, m.recentHours), created: now}
			m.slots[b.Scope] = s
		}
		s.mu.Lock()
		start := b.Period.Start(now)
		newPeriod := !s.start.Equal(start)
		if newPeriod {
			// A new slot, a new period, or another period kind: count
			// this gateway's charges since start (from the recent hours)
			// and start from no stored figure until the next refresh.
			s.local = 0
			for _, e := range s.ring {
				if e.hour >= start.Unix() {
					s.local += e.amt
				}
			}
			s.stored = 0
			s.shared.Store(0)
			// The slot counted from the period's start (it existed then):
			// nothing of the period came before it.
			s.origin, s.hasBase = 0, !s.created.After(start)
			s.start = start
			s.refreshed = false
			s.settleSpent()
		}
		s.start, s.period, s.base, s.maxCost, s.incr = start, b.Period, b, b.MaxCost, extra[b.Scope]
		s.limit.Store(floorUnits(b.MaxCost + extra[b.Scope]))
		if n := m.slice.Load(); n > 1 && (s.sliceN == 0 || newPeriod) {
			// in force, or in a new period, while sliced: counted from
			// here (again at the first refresh)
			s.sliceN = n
			s.baseline()
		}
		s.recap()
		s.soft.Store(units(b.SoftLimit))
		s.active.Store(true)
		s.mu.Unlock()
		if t.slots[b.Scope] == nil {
			kn := kindName{b.Kind, b.Name}
			t.byName[kn] = append(t.byName[kn], chainEntry{slot: s, model: b.Model})
		}
		t.slots[b.Scope] = s
		t.budgets = append(t.budgets, b)
	}
	for sc, s := range m.slots {
		if t.slots[sc] == nil {
			s.active.Store(false)
		}
	}
	m.mu.Unlock()
	m.table.Store(t)
	return t
}

// Status is a budget as listings show it.
type Status struct {
	Budget
	PeriodStart    time.Time
	Increase       float64 // unexpired increases, GPU-hours
	EffectiveLimit float64
	Spent          float64
	Held           float64
}

// Status returns the live figures of every budget in force.
func (t *Table) Status() []Status {
	out := make([]Status, 0, len(t.budgets))
	for _, b := range t.budgets {
		s := t.slots[b.Scope]
		s.mu.Lock()
		st := Status{Budget: b, PeriodStart: s.start, Increase: s.incr, EffectiveLimit: s.maxCost + s.incr}
		s.mu.Unlock()
		st.Spent, st.Held = gpuHours(s.spent.Load()), gpuHours(s.held.Load())
		out = append(out, st)
	}
	return out
}

// Held returns the GPU-hours held on every budget in force.
func (t *Table) Held() float64 {
	var h int64
	for _, s := range t.slots {
		h += s.held.Load()
	}
	return gpuHours(h)
}

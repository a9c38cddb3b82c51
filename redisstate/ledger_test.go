package redisstate

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/go-llmflow/llmflow/budgets"
)

// replica is one gateway's side of a shared ledger: its own Mem (budgets
// in force, spend from the store) and a Ledger over the shared Redis.
type replica struct {
	mem *budgets.Mem
	l   *Ledger
	t   *budgets.Table
}

var orgScope = budgets.Scope{Kind: budgets.KindOrg, Name: "o"}

// newReplica applies a budget of limit GPU-hours on org "o", with the
// store reporting stored GPU-hours spent this period.
func newReplica(t testing.TB, rdb redis.UniversalClient, prefix string, now time.Time, limit, stored float64) *replica {
	t.Helper()
	m := budgets.NewMem(time.Hour)
	b := budgets.Budget{Scope: orgScope, Period: budgets.Day, MaxCost: limit}
	tab := m.Apply([]budgets.Budget{b}, nil, now)
	m.Refresh(orgScope, budgets.Day.Start(now), budgets.StoredSpend{Older: stored}, now)
	l := NewLedger(rdb, LedgerOptions{Prefix: prefix, Timeout: 200 * time.Millisecond})
	l.setLocal(m)
	return &replica{mem: m, l: l, t: tab}
}

func (p *replica) request(now time.Time, key string, lim budgets.KeyLimits, cost float64) *budgets.Request {
	r := &budgets.Request{Limits: lim, Start: now, PromptCost: cost}
	r.Slots = p.t.Chain("o", "", "", key, "", nil).Select("m", nil)
	if key != "" {
		r.Key = p.mem.Key(key)
	}
	return r
}

func slotHash(t *testing.T, rdb redis.UniversalClient, prefix string, now time.Time) (held, charged int64) {
	t.Helper()
	k := prefix + "b:" + budgets.ID(orgScope) + ":" + strconv.FormatInt(budgets.Day.Start(now).Unix(), 10)
	v, err := rdb.HGetAll(context.Background(), k).Result()
	if err != nil {
		t.Fatal(err)
	}
	for f, x := range v {
		if strings.HasPrefix(f, "h:") {
			held += toInt(x)
		}
	}
	return held, toInt(v["charged"])
}

// TestLedgerRaceNearlySpent: two replicas race 40 reservations on a budget
// of 1 GPU-hour of which the store says 0.9 is spent; each request holds
// 0.01. Together they hold exactly 10 (never more), each hold is charged
// in full, and then both refuse.
func TestLedgerRaceNearlySpent(t *testing.T) {
	rdb, prefix := testRedis(t)
	now := time.Date(2026, 12, 1, 8, 0, 0, 0, time.UTC)
	a := newReplica(t, rdb, prefix, now, 1, 0.9)
	b := newReplica(t, rdb, prefix, now, 1, 0.9)
	var ok atomic.Int64
	var mu sync.Mutex
	type reserved struct {
		r  *budgets.Request
		by *Ledger // settles where it reserved (its replica's holds)
	}
	var held []reserved
	var wg sync.WaitGroup
	for i := range 40 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			p := a
			if i%2 == 1 {
				p = b
			}
			r := p.request(now, "", budgets.KeyLimits{}, 0.01)
			_, err := p.l.Reserve(now, r)
			if err == nil {
				ok.Add(1)
				mu.Lock()
				held = append(held, reserved{r, p.l})
				mu.Unlock()
				return
			}
			var rf *budgets.Refusal
			if !errors.As(err, &rf) || rf.Reason != "budget" || rf.Scope != orgScope {
				t.Errorf("refusal: %v", err)
			}
		}()
	}
	wg.Wait()
	if n := ok.Load(); n != 10 {
		t.Fatalf("admitted %d across two replicas, want 10 (1 − 0.9 GPU-hours, 0.01 each)", n)
	}
	h, c := slotHash(t, rdb, prefix, now)
	if h != 10*budgets.Units(0.01) || c != budgets.Units(0.9) {
		t.Fatalf("redis: held %d charged %d", h, c)
	}
	if a.l.Health().Fallback || b.l.Health().Fallback {
		t.Fatal("fell back")
	}
	for _, x := range held {
		x.by.Settle(now, x.r, false, 0.01, 10)
	}
	h, c = slotHash(t, rdb, prefix, now)
	if h != 0 || c < budgets.Units(0.9)+10*budgets.Units(0.01)-10 {
		t.Fatalf("after settling: held %d charged %d", h, c)
	}
	for _, p := range []*replica{a, b} {
		if _, err := p.l.Reserve(now, p.request(now, "", budgets.KeyLimits{}, 0.001)); !errors.Is(err, budgets.ErrExhausted) {
			t.Fatalf("after the budget is spent: %v", err)
		}
	}
}

// TestLedgerLowersOutput: what is left pays for part of the output; the
// shared ledger lowers it as Mem does.
func TestLedgerLowersOutput(t *testing.T) {
	rdb, prefix := testRedis(t)
	now := time.Date(2026, 12, 1, 8, 0, 0, 0, time.UTC)
	a := newReplica(t, rdb, prefix, now, 1, 0.9)
	r := a.request(now, "", budgets.KeyLimits{}, 0.05)
	r.OutputCost, r.WantOutput = 0.001, 1000 // 0.05 + 1 GPU-hour wanted, 0.1 left
	if _, err := a.l.Reserve(now, r); err != nil {
		t.Fatal(err)
	}
	if !r.Lowered || r.Output != 50 || r.HeldUnits() > budgets.Units(0.1) {
		t.Fatalf("output %d lowered %v held %d", r.Output, r.Lowered, r.HeldUnits())
	}
	a.l.Settle(now, r, false, 0.06, 100)
}

// TestLedgerKeyLimitsShared: a key's max_inflight and RPM hold across two
// replicas.
func TestLedgerKeyLimitsShared(t *testing.T) {
	rdb, prefix := testRedis(t)
	now := time.Date(2026, 12, 1, 8, 0, 30, 0, time.UTC)
	a := newReplica(t, rdb, prefix, now, 100, 0)
	b := newReplica(t, rdb, prefix, now, 100, 0)
	ps := []*replica{a, b}

	lim := budgets.KeyLimits{MaxInFlight: 3}
	var in []*budgets.Request
	for i := range 6 {
		p := ps[i%2]
		r := p.request(now, "k1", lim, 0.001)
		_, err := p.l.Reserve(now, r)
		var rf *budgets.Refusal
		switch {
		case i < 3 && err != nil:
			t.Fatalf("request %d: %v", i, err)
		case i >= 3 && (!errors.As(err, &rf) || rf.Reason != "max_inflight"):
			t.Fatalf("request %d beyond max_inflight 3 over two replicas: %v", i, err)
		}
		if err == nil {
			in = append(in, r)
		}
	}
	ps[0].l.Settle(now, in[0], false, 0.001, 1)
	r := b.request(now, "k1", lim, 0.001)
	if _, err := b.l.Reserve(now, r); err != nil {
		t.Fatalf("after one settled on the other replica: %v", err)
	}
	b.l.Settle(now, r, false, 0, 0)
	for i, r := range in[1:] {
		ps[(i+1)%2].l.Settle(now, r, false, 0.001, 1)
	}

	lim = budgets.KeyLimits{RPM: 5}
	for i := range 10 {
		p := ps[i%2]
		at := now.Add(time.Duration(i) * time.Second)
		r := p.request(at, "k2", lim, 0)
		_, err := p.l.Reserve(at, r)
		var rf *budgets.Refusal
		switch {
		case i < 5 && err != nil:
			t.Fatalf("request %d: %v", i, err)
		case i >= 5 && (!errors.As(err, &rf) || rf.Reason != "rpm" || rf.RetryAfter <= 0 || rf.RetryAfter > time.Minute):
			t.Fatalf("request %d beyond 5 RPM over two replicas: %v", i, err)
		}
		if err == nil {
			p.l.Settle(at, r, false, 0, 0)
		}
	}
	// a minute after the first, its second has left the window
	at := now.Add(61 * time.Second)
	r = a.request(at, "k2", lim, 0)
	if _, err := a.l.Reserve(at, r); err != nil {
		t.Fatalf("a minute later: %v", err)
	}
	a.l.Settle(at, r, false, 0, 0)
}

// TestLedgerSettleAfterRedisLostData: Redis loses every key while
// requests are in flight; their settles leave nothing negative, and the
// charge lands on the store's figure.
func TestLedgerSettleAfterRedisLostData(t *testing.T) {
	rdb, prefix := testRedis(t)
	now := time.Date(2026, 12, 1, 8, 0, 0, 0, time.UTC)
	a := newReplica(t, rdb, prefix, now, 1, 0.5)
	b := newReplica(t, rdb, prefix, now, 1, 0.5)
	lim := budgets.KeyLimits{MaxInFlight: 10, RPM: 100, TPM: 100000}
	var rs []*budgets.Request
	for i := range 4 {
		p := []*replica{a, b}[i%2]
		r := p.request(now, "k", lim, 0.01)
		r.Tokens = 100
		if _, err := p.l.Reserve(now, r); err != nil {
			t.Fatal(err)
		}
		rs = append(rs, r)
	}
	keys, _ := rdb.Keys(context.Background(), prefix+"*").Result()
	if len(keys) == 0 {
		t.Fatal("nothing in redis")
	}
	rdb.Del(context.Background(), keys...)
	for i, r := range rs {
		[]*replica{a, b}[i%2].l.Settle(now, r, false, 0.01, 10)
	}
	h, c := slotHash(t, rdb, prefix, now)
	if h != 0 || c < budgets.Units(0.5) || c > budgets.Units(0.5)+4*budgets.Units(0.01)+4 {
		t.Fatalf("after settles on lost data: held %d charged %d", h, c)
	}
	ctx := context.Background()
	if n, err := rdb.HLen(ctx, prefix+"k:k").Result(); err != nil || n != 0 {
		t.Fatalf("in-flight counter left: %d %v", n, err)
	}
	w, _ := rdb.HGetAll(ctx, prefix+"w:k").Result()
	for f, v := range w {
		if toInt(v) < 0 {
			t.Fatalf("window %s = %s", f, v)
		}
	}
	r := a.request(now, "k", lim, 0.01)
	if _, err := a.l.Reserve(now, r); err != nil {
		t.Fatal(err)
	}
	a.l.Settle(now, r, false, 0, 0)
}

// TestLedgerFallback: the ledger's Redis is killed with a request in
// flight. Reservations go on against the replica's own Mem (Health says
// so); the settle Redis missed is replayed when it returns (empty), and
// nothing is held there afterwards.
func TestLedgerFallback(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a redis-server")
	}
	srv := startOwnRedis(t, "")
	rdb := redis.NewClient(&redis.Options{Addr: srv.addr(), MaxRetries: -1, DialTimeout: 100 * time.Millisecond})
	defer rdb.Close()
	now := time.Date(2026, 12, 1, 8, 0, 0, 0, time.UTC)
	a := newReplica(t, rdb, "t:", now, 1, 0)
	r1 := a.request(now, "k", budgets.KeyLimits{MaxInFlight: 5}, 0.1)
	if _, err := a.l.Reserve(now, r1); err != nil {
		t.Fatal(err)
	}
	srv.kill()
	r2 := a.request(now, "k", budgets.KeyLimits{MaxInFlight: 5}, 0.1)
	if local, err := a.l.Reserve(now, r2); err != nil || !local {
		t.Fatalf("reserve with redis away: %v, local %v", err, local)
	}
	if h := a.l.Health(); !h.Fallback || h.Err == "" {
		t.Fatalf("health: %+v", h)
	}
	if st := a.mem.Table().Status(); st[0].Held < 0.1 {
		t.Fatalf("fallback hold not in the replica's Mem: %+v", st)
	}
	a.l.Settle(now, r1, false, 0.1, 1) // Redis away: kept to replay
	a.l.Settle(now, r2, true, 0.1, 1)
	if h := a.l.Health(); h.Pending != 1 {
		t.Fatalf("pending settles: %+v", h)
	}
	a.l.Probe()
	if !a.l.Health().Fallback {
		t.Fatal("fallback ended while redis is down")
	}
	startOwnRedis(t, srv.port)
	a.l.Probe()
	if h := a.l.Health(); h.Fallback || h.Pending != 0 {
		t.Fatalf("after redis returned: %+v", h)
	}
	h, c := slotHash(t, rdb, "t:", now)
	if h != 0 || c != budgets.Units(0.1) {
		t.Fatalf("replayed settle: held %d charged %d", h, c)
	}
	if st := a.mem.Table().Status(); st[0].Held != 0 || st[0].Spent < 0.2-1e-9 {
		t.Fatalf("replica's own figures: %+v", st)
	}
}

// BenchmarkLedgerReserveSettle: one admission and its settle on the
// machine's Redis — a key with RPM, TPM and max_inflight, one budget.
func BenchmarkLedgerReserveSettle(b *testing.B) {
	rdb, prefix := testRedis(b)
	now := time.Date(2026, 12, 1, 8, 0, 0, 0, time.UTC)
	p := newReplica(b, rdb, prefix, now, 1e6, 0)
	lim := budgets.KeyLimits{RPM: 1 << 30, TPM: 1 << 30, MaxInFlight: 1000}
	r := p.request(now, "k", lim, 0.0001)
	r.Tokens = 10
	b.ResetTimer()
	for b.Loop() {
		if _, err := p.l.Reserve(now, r); err != nil {
			b.Fatal(err)
		}
		p.l.Settle(now, r, false, 0.0001, 10)
	}
}

// TestLedgerTPMAndDoubleSettle: a key's TPM window is shared (tokens
// admitted on one replica, reconciled at settle, count on the other), and
// a second Settle of the same request gives nothing back twice.
func TestLedgerTPMAndDoubleSettle(t *testing.T) {
	rdb, prefix := testRedis(t)
	now := time.Date(2026, 12, 1, 8, 0, 0, 0, time.UTC)
	a := newReplica(t, rdb, prefix, now, 1, 0)
	b := newReplica(t, rdb, prefix, now, 1, 0)
	lim := budgets.KeyLimits{TPM: 1000, MaxInFlight: 1}
	r := a.request(now, "k", lim, 0.1)
	r.Tokens = 100
	if _, err := a.l.Reserve(now, r); err != nil {
		t.Fatal(err)
	}
	a.l.Settle(now, r, false, 0.1, 900) // 900 tokens really used
	a.l.Settle(now, r, false, 0.1, 900) // a second settle: nothing
	h, c := slotHash(t, rdb, prefix, now)
	if h != 0 || c != budgets.Units(0.1) {
		t.Fatalf("after a double settle: held %d charged %d", h, c)
	}
	r2 := b.request(now, "k", lim, 0.1)
	r2.Tokens = 200
	var rf *budgets.Refusal
	if _, err := b.l.Reserve(now, r2); !errors.As(err, &rf) || rf.Reason != "tpm" {
		t.Fatalf("900 of 1000 tokens used on the other replica, 200 asked: %v", err)
	}
	r2.Tokens = 50
	if _, err := b.l.Reserve(now, r2); err != nil {
		t.Fatalf("50 tokens fit: %v", err)
	}
	b.l.Settle(now, r2, false, 0, 50)
}

// TestLedgerDeadReplicaHoldsExpire: a replica dies with requests in
// flight (reserved, never settled). Their holds and in-flight places
// count while such a request could still run, and not after two bucket
// widths (InFlightTTL, the longest a request may run); a late settle of
// a dropped bucket gives nothing back twice.
func TestLedgerDeadReplicaHoldsExpire(t *testing.T) {
	rdb, prefix := testRedis(t)
	now := time.Date(2026, 12, 1, 8, 0, 0, 0, time.UTC)
	ttl := 10 * time.Minute
	mk := func() *replica {
		p := newReplica(t, rdb, prefix, now, 1, 0)
		// a lease longer than the test: the buckets alone drop the holds
		p.l = NewLedger(rdb, LedgerOptions{Prefix: prefix, InFlightTTL: ttl, Lease: time.Hour})
		p.l.setLocal(p.mem)
		return p
	}
	dead, live := mk(), mk()
	lim := budgets.KeyLimits{MaxInFlight: 1}
	lost := dead.request(now, "k", lim, 0.6)
	if _, err := dead.l.Reserve(now, lost); err != nil {
		t.Fatal(err)
	}
	at := now.Add(ttl)
	if _, err := live.l.Reserve(at, live.request(at, "k", lim, 0.6)); err == nil {
		t.Fatal("admitted while the dead replica's request could still run")
	}
	at = now.Add(2*ttl + time.Second)
	r := live.request(at, "k", lim, 0.6)
	if _, err := live.l.Reserve(at, r); err != nil {
		t.Fatalf("the dead replica's hold still counts after %v: %v", 2*ttl, err)
	}
	dead.l.Settle(at, lost, false, 0.1, 1) // a late settle: only its charge counts
	if h, c := slotHash(t, rdb, prefix, now); h != budgets.Units(0.6) || c != budgets.Units(0.1) {
		t.Fatalf("held %d charged %d", h, c)
	}
	live.l.Settle(at, r, false, 0.1, 1)
	if h, _ := slotHash(t, rdb, prefix, now); h != 0 {
		t.Fatalf("held %d at the end", h)
	}
}

// TestLedgerKilledReplicaLeaseExpires: a replica killed with a request in
// flight (reserved, never settled; it stops renewing its lease) holds
// the budget and the key's in-flight place while it lives, and no longer
// once its lease expires: in seconds, not after the InFlightTTL buckets
// (an hour and more). A replica that stops gives its lease up: what it
// left held stops counting at once.
func TestLedgerKilledReplicaLeaseExpires(t *testing.T) {
	rdb, prefix := testRedis(t)
	now := time.Now()
	mk := func() *replica {
		p := newReplica(t, rdb, prefix, now, 1, 0)
		p.l = NewLedger(rdb, LedgerOptions{Prefix: prefix}) // the default lease, 3 s
		p.l.setLocal(p.mem)
		return p
	}
	killed, live := mk(), mk()
	ctx, kill := context.WithCancel(context.Background())
	beating := make(chan struct{})
	go func() { // its beats, as Run's, until it is killed
		defer close(beating)
		for ctx.Err() == nil {
			killed.l.Beat()
			time.Sleep(100 * time.Millisecond)
		}
	}()
	lim := budgets.KeyLimits{MaxInFlight: 1}
	if _, err := killed.l.Reserve(now, killed.request(now, "k", lim, 0.6)); err != nil {
		t.Fatal(err)
	}
	// While it lives, its place and hold count: the key's one place is
	// taken, and what is left of the budget does not pay for 0.6.
	for i := range 3 {
		if _, err := live.l.Reserve(now, live.request(now, "k", lim, 0.6)); err == nil {
			t.Fatalf("reservation %d admitted while the replica holding the key's place lives", i)
		}
		time.Sleep(200 * time.Millisecond) // renewed meanwhile, every 100 ms
	}
	if _, err := live.l.Reserve(now, live.request(now, "", budgets.KeyLimits{}, 0.6)); !errors.Is(err, budgets.ErrExhausted) {
		t.Fatalf("budget reservation while the hold's replica lives: %v", err)
	}
	kill() // as kill -9: no settle, its beats stop, its lease is not given up
	<-beating
	start := time.Now()
	deadline := start.Add(10 * time.Second)
	for {
		r := live.request(now, "k", lim, 0.6)
		if _, err := live.l.Reserve(now, r); err == nil {
			live.l.Settle(now, r, false, 0, 0)
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the killed replica's hold and place still count after 10 s")
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Logf("the killed replica's hold expired %v after its last beat", time.Since(start).Round(100*time.Millisecond))
	if h, _ := slotHash(t, rdb, prefix, now); h != 0 {
		t.Fatalf("held %d at the end", h)
	}
}

// TestLedgerStoppedReplicaReleasesLease: a replica whose Run ends gives up
// its lease; a hold it left (a settle lost) stops counting at once.
func TestLedgerStoppedReplicaReleasesLease(t *testing.T) {
	rdb, prefix := testRedis(t)
	now := time.Now()
	stopped, live := newReplica(t, rdb, prefix, now, 1, 0), newReplica(t, rdb, prefix, now, 1, 0)
	if _, err := stopped.l.Reserve(now, stopped.request(now, "", budgets.KeyLimits{}, 0.6)); err != nil {
		t.Fatal(err)
	}
	if _, err := live.l.Reserve(now, live.request(now, "", budgets.KeyLimits{}, 0.6)); !errors.Is(err, budgets.ErrExhausted) {
		t.Fatalf("while the replica holding 0.6 of 1 runs: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	stopped.l.Run(ctx, time.Hour) // returns at once, giving up the lease
	if _, err := live.l.Reserve(now, live.request(now, "", budgets.KeyLimits{}, 0.6)); err != nil {
		t.Fatalf("after the replica stopped: %v", err)
	}
}

// TestLedgerFallbackCountsHoldsInFlight: two replicas hold 0.3 GPU-hours
// each of a budget of 1 in Redis when it dies mid-burst. Each falls back
// to its half of what was left counting every replica's holds in flight
// as Redis last told it (0.4 / 2), not of what it alone knew (1 / 2): the
// holds in flight and everything admitted in the fallback together stay
// within the budget (before, 1.6 of 1). What another replica reserved
// after a replica's last reservation is the residual risk: here each
// reserved (a request without cost) after the other's hold.
func TestLedgerFallbackCountsHoldsInFlight(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a redis-server")
	}
	srv := startOwnRedis(t, "")
	rdb := redis.NewClient(&redis.Options{Addr: srv.addr(), MaxRetries: -1, DialTimeout: 100 * time.Millisecond})
	defer rdb.Close()
	now := time.Date(2026, 12, 1, 8, 0, 0, 0, time.UTC)
	mk := func() *replica {
		p := newReplica(t, rdb, "t:", now, 1, 0)
		p.l = NewLedger(rdb, LedgerOptions{Prefix: "t:", Timeout: 200 * time.Millisecond, Replicas: func() int64 { return 2 }})
		p.l.setLocal(p.mem)
		return p
	}
	a, b := mk(), mk()
	var inFlight []*budgets.Request
	for _, p := range []*replica{a, b} {
		r := p.request(now, "", budgets.KeyLimits{}, 0.3)
		if local, err := p.l.Reserve(now, r); err != nil || local {
			t.Fatalf("reserve in redis: %v (local %v; %+v)", err, local, p.l.Health())
		}
		inFlight = append(inFlight, r)
	}
	if _, err := a.l.Reserve(now, a.request(now, "", budgets.KeyLimits{}, 0)); err != nil {
		t.Fatal(err)
	}
	srv.kill()
	total := 0.6 // held in flight
	for _, p := range []*replica{a, b} {
		for range 100 {
			r := p.request(now, "", budgets.KeyLimits{}, 0.01)
			local, err := p.l.Reserve(now, r)
			if err != nil {
				break
			}
			if !local {
				t.Fatal("reserved in a dead redis")
			}
			total += 0.01
		}
	}
	t.Logf("in flight and admitted in the fallback: %.2f of 1", total)
	if total > 1+1e-9 {
		t.Fatalf("%.2f GPU-hours held or admitted of a budget of 1", total)
	}
	if total < 0.9 {
		t.Fatalf("only %.2f of 1 used: the slices are too small", total)
	}
	for i, p := range []*replica{a, b} { // kept to replay: nothing lost
		p.l.Settle(now, inFlight[i], false, 0.3, 1)
	}
	if h := a.l.Health(); h.Pending != 1 {
		t.Fatalf("a's pending settles: %+v", h)
	}
}

// TestLedgerRedisRestartedEmpty: two replicas hold 0.3 GPU-hours each of a
// budget of 1, and 2 places of a key's max_inflight of 3, in Redis when it
// restarts empty (no persistence; the clients reconnect and see no error).
// The next reservation finds the ledger's epoch gone: the holds in flight
// were lost, so the replicas admit on their fallback slices, counted from
// what Redis said was used before (0.6), not on the empty Redis (before:
// 0.5 more admitted on an empty Redis, 1.1 of 1; and the key's places
// counted from 0). Once a replica's requests admitted before the loss
// have settled, it shares Redis again, in the new epoch.
func TestLedgerRedisRestartedEmpty(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a redis-server")
	}
	srv := startOwnRedis(t, "")
	rdb := redis.NewClient(&redis.Options{Addr: srv.addr(), DialTimeout: 100 * time.Millisecond})
	defer rdb.Close()
	now := time.Date(2026, 12, 1, 8, 0, 0, 0, time.UTC)
	mk := func() *replica {
		p := newReplica(t, rdb, "t:", now, 1, 0)
		p.l = NewLedger(rdb, LedgerOptions{Prefix: "t:", Timeout: 200 * time.Millisecond, Replicas: func() int64 { return 2 }})
		p.l.setLocal(p.mem)
		return p
	}
	a, b := mk(), mk()
	lim := budgets.KeyLimits{MaxInFlight: 3}
	var inFlight []*budgets.Request
	for _, p := range []*replica{a, b, a} { // a's last reservation sees both holds
		cost := 0.3
		if len(inFlight) == 2 {
			cost = 0
		}
		r := p.request(now, "k", lim, cost)
		if local, err := p.l.Reserve(now, r); err != nil || local {
			t.Fatalf("reserve in redis: %v (local %v)", err, local)
		}
		inFlight = append(inFlight, r)
	}
	srv.kill()
	startOwnRedis(t, srv.port) // empty
	// the key has 3 places and 3 requests in flight: a fourth is refused
	if _, err := a.l.Reserve(now, a.request(now, "k", lim, 0)); err == nil {
		t.Fatal("a fourth request of a key with max_inflight 3 admitted after Redis lost the count")
	}
	if h := a.l.Health(); !h.Fallback {
		t.Fatalf("after the loss: %+v, want the fallback", h)
	}
	total := 0.6 // held in flight before the loss
	for _, p := range []*replica{a, b} {
		for range 100 {
			if _, err := p.l.Reserve(now, p.request(now, "", budgets.KeyLimits{}, 0.01)); err != nil {
				break
			}
			total += 0.01
		}
	}
	t.Logf("held before the loss and admitted after it: %.2f of 1", total)
	if total > 1+1e-9 || total < 0.9 {
		t.Fatalf("%.2f GPU-hours of a budget of 1 after Redis lost its data", total)
	}
	// a's requests from before settle: it shares Redis again
	a.l.Settle(now, inFlight[0], false, 0.3, 1)
	a.l.Probe()
	if !a.l.Health().Fallback {
		t.Fatal("back on Redis with a request from before the loss in flight")
	}
	a.l.Settle(now, inFlight[2], false, 0, 1)
	a.l.Probe()
	if h := a.l.Health(); h.Fallback {
		t.Fatalf("requests from before the loss settled: %+v, want back on Redis", h)
	}
	r := a.request(now, "", budgets.KeyLimits{}, 0)
	if local, err := a.l.Reserve(now, r); err != nil || local {
		t.Fatalf("reserve after the fallback: %v (local %v)", err, local)
	}
}

// TestLedgerRedisRestartedEmptyWindows: a key's RPM does not start afresh
// when Redis restarts empty: the replica that admitted the minute's
// requests counts them in its fallback, and counts them again in Redis
// when it shares it again (before: 3 more of rpm = 3 at once).
func TestLedgerRedisRestartedEmptyWindows(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a redis-server")
	}
	srv := startOwnRedis(t, "")
	rdb := redis.NewClient(&redis.Options{Addr: srv.addr(), DialTimeout: 100 * time.Millisecond})
	defer rdb.Close()
	now := time.Now()
	a := newReplica(t, rdb, "t:", now, 1, 0)
	lim := budgets.KeyLimits{RPM: 3}
	for range 3 {
		r := a.request(now, "k", lim, 0)
		if local, err := a.l.Reserve(now, r); err != nil || local {
			t.Fatalf("reserve in redis: %v (local %v)", err, local)
		}
		a.l.Settle(now, r, false, 0, 1)
	}
	srv.kill()
	startOwnRedis(t, srv.port) // empty
	if local, err := a.l.Reserve(now, a.request(now, "k", lim, 0)); err == nil {
		t.Fatalf("a fourth request in the minute with rpm = 3 admitted after Redis lost the window (local %v)", local)
	}
	a.l.Probe() // nothing from before in flight: back on Redis, the minute's requests counted there again
	if h := a.l.Health(); h.Fallback {
		t.Fatalf("after the probe: %+v", h)
	}
	local, err := a.l.Reserve(now, a.request(now, "k", lim, 0))
	if err == nil || local {
		t.Fatalf("a fourth request in the minute with rpm = 3 on the restarted Redis: %v (local %v), want an rpm refusal there", err, local)
	}
}

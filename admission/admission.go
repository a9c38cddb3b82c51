// Package admission is the one seam between a gateway's admission steps
// and the state they share: a request's place in its pool's fair-share
// counters and its budget and key-limit reservation are taken together by
// one Admit and given back together by one Release, all or nothing.
//
// Shared is that seam. Mem is its implementation in this process, for one
// gateway: it composes the pool's fair-share counters
// (fairshare.MemCounters) and the gateway's ledger (budgets.Mem). Several
// replicas share one through Redis (redisstate), which does each side in
// one round trip. A Source hands each pool of a gateway its Shared; the
// gateway never learns which implementation it has.
//
// It is pure: standard library, fairshare and budgets only, no I/O.
package admission

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/go-llmflow/llmflow/budgets"
	"github.com/go-llmflow/llmflow/fairshare"
)

// Admission is one request's claim on the state its pool's admissions
// share. The admission steps fill the inputs; Admit fills the outputs, and
// Release reads both. It is meant to live inside the caller's per-request
// state, so admission allocates nothing.
type Admission struct {
	// Chain is the request's accounts in its pool
	// (fairshare.Pool.Locate): never nil.
	Chain *fairshare.Chain
	// Budget is the request's budgets and key limits, filled as for
	// budgets.Mem.Reserve (which runs at Budget.Start); nil: none.
	Budget *budgets.Request

	// Placement is where Admit counted the request in the pool's
	// fair-share counters (fairshare.Place).
	Placement fairshare.Placement
	// Capped is the index in Chain of the account whose cap on requests
	// in flight (Slurm's GrpTRES, fairshare.Chain.Caps) the request would
	// exceed when Admit returns ErrCapped; -1 otherwise.
	Capped int
	// BudgetLocal is set by an implementation shared between replicas
	// when it reserved the budget side in this process's ledger (its
	// fallback while the shared store is away): Release settles it there.
	// Mem leaves it false.
	BudgetLocal bool
	// Leased is set (not 0) by an implementation shared between replicas
	// when it admitted the request from what it holds in this process of
	// the shared reservations and limits (leases taken from the shared
	// store beforehand): the generation of those leases, so that Release
	// gives back there what is still theirs. Mem leaves it 0.
	Leased uint64
}

// End is how an admitted request ended, for Release.
type End struct {
	At time.Time
	// GPUHours is the request's real cost: charged to its budgets and to
	// the fair-share usage of its accounts (≤ 0, NaN or infinite: none).
	GPUHours float64
	// Tokens is what the request really used (prompt and output), for its
	// key's tokens-per-minute window.
	Tokens int64
}

// ErrCapped is Admit's refusal of a request that would take an account of
// its chain over its cap on requests in flight (Admission.Capped says
// which).
var ErrCapped = errors.New("admission: an account's cap on requests in flight is reached")

// Shared is the state the admissions of one pool share: its fair-share
// counters and the budget ledger. Implementations are safe for concurrent
// use.
type Shared interface {
	// Admit checks the caps of a.Chain's accounts, reserves a.Budget
	// (when not nil) and counts the request in the pool's counters, placed
	// by fairshare.Place, all or nothing: a request refused by a budget or
	// a key limit (a *budgets.Refusal) or by a cap (ErrCapped) holds
	// nothing anywhere.
	Admit(ctx context.Context, a *Admission) error
	// Release gives back what a successful Admit of a took, charges the
	// request's cost and tokens, and settles its budgets. It must be
	// called exactly once after a successful Admit. A cancelled ctx does
	// not stop it: what was taken is always given back.
	Release(ctx context.Context, a *Admission, end End)
}

// CapacityShare is this replica's part of a capacity shared with the
// other live replicas (the parts of all of them sum to it), whether that
// part is settled (false: the replica is joining and holds 0 for now),
// and a channel closed when it changes. Share only reads memory.
type CapacityShare interface {
	Share(capacity int) (part int, settled bool, changed <-chan struct{})
}

// Pool is what one pool of a gateway gets from a Source.
type Pool struct {
	// Counters are the pool's fair-share counters, which the pool's
	// fairshare.Pool reads (ranks, snapshots, the queue's priorities).
	Counters fairshare.Counters
	// Shared admits and releases the pool's requests over Counters and
	// the ledger.
	Shared Shared
	// Share, when not nil, is this replica's part of the pool's
	// capacity, for a gateway-side queue (replicas share the engine); nil:
	// the whole capacity is this gateway's.
	Share CapacityShare
	// Room, when not nil, is this replica's part of the slots the
	// requests within their organisation's reservation leave to borrowers
	// on all replicas, for a pool whose engines queue by priority and
	// whose gateway takes borrowed slots back (replicas share the engine);
	// nil: one gateway, whose queue sees every request.
	Room BorrowRoom
	// Capacity, when not nil, makes the replicas agree on one capacity
	// for a pool with capacity = "auto"; nil: this gateway decides alone.
	Capacity CapacityAgreement
}

// BorrowRoom divides among replicas the slots of a pool that the requests
// within their organisation's reservation (top requests, which take a slot
// at once wherever they arrive) leave to borrowers, so that the borrowers
// of all replicas together get what one gateway's would: the capacity less
// every replica's top requests, first where borrowers wait for it. A
// replica whose room shrinks below the borrowers it holds takes slots back
// from them.
type BorrowRoom interface {
	// Room returns this replica's part of the room of capacity, given the
	// top requests holding a slot here now and the borrowers holding or
	// waiting for one, and a channel closed when it may have changed (the
	// other replicas' counts, or the replicas). Room only reads memory.
	Room(capacity, tops, borrowers int) (room int, changed <-chan struct{})
}

// CapacityAgreement makes the replicas of a pool agree on one capacity C:
// one of them decides at a time, under a lease, and the others follow.
type CapacityAgreement interface {
	// Agree offers this replica's C and returns the C in force and
	// whether this replica decides it for the next ttl. A replica that
	// takes the lease over adopts the C in force (it is returned, not
	// overwritten); the first to decide sets it.
	Agree(ctx context.Context, c int, ttl time.Duration) (agreed int, leads bool, err error)
}

// Source gives each pool of a gateway the state its admissions share. A
// Source outlives the gateways built on it (a configuration reload): the
// same pool name gives the same counters, so requests in flight and usage
// carry over.
type Source interface {
	// Pool returns the shared state of the named pool, whose usage decays
	// with halfLife. ledger is the gateway's own: the budgets in force,
	// the keys' states and this gateway's figures (which a shared
	// implementation keeps too, and falls back on).
	Pool(name string, halfLife time.Duration, ledger *budgets.Mem) Pool
	// Health reports on the state shared with other replicas, for
	// /healthz; nil when there is none (one gateway).
	Health() *Health
}

// Health is the "shared" block of /healthz.
type Health struct {
	// Status is "ok", or "fallback" while the shared store is away: each
	// replica admits against its own slice of the reservations.
	Status string `json:"status"`
	// Replicas is the number of live replicas last seen (the divisor of
	// the slice).
	Replicas int64 `json:"replicas"`
	// Since is when the fallback began.
	Since *time.Time `json:"fallback_since,omitempty"`
	// Error is the last failure of the shared store during a fallback.
	Error string `json:"error,omitempty"`
	// LedgerFallback is true while the budget holds and key limits are
	// kept by this replica alone (the shared store away).
	LedgerFallback bool `json:"ledger_fallback,omitempty"`
}

// Mem is Shared in this process: the pool's counters and the gateway's
// ledger, the reservation first, then the count with its caps
// (fairshare.AdmitCapped), whose refusal cancels the reservation
// (budgets.Mem.Cancel: not even the key's rate windows count it). It
// does not allocate.
type Mem struct {
	Counters fairshare.Counters
	Ledger   *budgets.Mem
}

var _ Shared = (*Mem)(nil)

// Admit implements Shared.
func (m *Mem) Admit(_ context.Context, a *Admission) error {
	a.Capped = -1
	if a.Budget != nil {
		if err := m.Ledger.Reserve(a.Budget.Start, a.Budget); err != nil {
			return err
		}
	}
	p, capped := fairshare.AdmitCapped(m.Counters, a.Chain)
	if capped >= 0 {
		if a.Budget != nil {
			m.Ledger.Cancel(a.Budget)
		}
		a.Capped = capped
		return ErrCapped
	}
	a.Placement = p
	return nil
}

// Release implements Shared.
func (m *Mem) Release(_ context.Context, a *Admission, e End) {
	if a.Budget != nil {
		m.Ledger.Settle(e.At, a.Budget, e.GPUHours, e.Tokens)
	}
	m.Counters.Release(a.Chain, a.Placement, e.GPUHours, e.At)
}

// MemSource is a Source in this process: one fairshare.MemCounters per
// pool for its life, and Mem over them.
type MemSource struct {
	mu    sync.Mutex
	pools map[string]*fairshare.MemCounters
}

var _ Source = (*MemSource)(nil)

// NewMemSource returns a Source with no pool yet.
func NewMemSource() *MemSource {
	return &MemSource{pools: map[string]*fairshare.MemCounters{}}
}

// Pool implements Source.
func (s *MemSource) Pool(name string, halfLife time.Duration, ledger *budgets.Mem) Pool {
	s.mu.Lock()
	defer s.mu.Unlock()
	c := s.pools[name]
	if c == nil {
		c = fairshare.NewMemCounters(halfLife)
		s.pools[name] = c
	}
	return Pool{Counters: c, Shared: &Mem{Counters: c, Ledger: ledger}}
}

// Health implements Source: nothing is shared.
func (s *MemSource) Health() *Health { return nil }

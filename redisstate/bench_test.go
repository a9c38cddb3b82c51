package redisstate

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/go-llmflow/llmflow/admission"
	"github.com/go-llmflow/llmflow/budgets"
	"github.com/go-llmflow/llmflow/fairshare"
)

// BenchmarkAdmitRelease is one request's cost in the shared counters: an
// admission and a release with a charge (two round trips to the real
// Redis), on a chain organisation / team / project.
//
//	go test ./redisstate -run '^$' -bench AdmitRelease
func BenchmarkAdmitRelease(b *testing.B) {
	rdb, prefix := testRedis(b)
	c := started(New(rdb, "bench", time.Hour, Options{Prefix: prefix}))
	ch := deepChain(c, 1<<20, 1<<19, 1<<18)
	now := time.Now()
	b.ReportAllocs()
	for b.Loop() {
		p := c.Admit(ch)
		c.Release(ch, p, 1e-6, now)
	}
}

// BenchmarkRide is one request's cost with a budget and key limits too:
// Admissions, the counters' and the ledger's work in one script each side
// (two round trips a request); apart, two scripts each side.
//
//	go test ./redisstate -run '^$' -bench Ride
func BenchmarkRide(b *testing.B) {
	rdb, prefix := testRedis(b)
	now := time.Date(2026, 12, 1, 8, 0, 0, 0, time.UTC)
	rep := newReplica(b, rdb, prefix, now, 1e6, 0)
	c := started(New(rdb, "bench", time.Hour, Options{Prefix: prefix}))
	ch := deepChain(c, 1<<20, 1<<19, 1<<18)
	limits := budgets.KeyLimits{RPM: 1 << 30, TPM: 1 << 40, MaxInFlight: 1 << 20}
	adm, ctx := NewAdmissions(c, rep.l), context.Background()
	b.Run("riding", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			a := &admission.Admission{Chain: ch, Budget: rep.request(now, "k", limits, 1e-6)}
			if err := adm.Admit(ctx, a); err != nil {
				b.Fatal(err)
			}
			adm.Release(ctx, a, admission.End{At: now, GPUHours: 1e-6, Tokens: 10})
		}
	})
	b.Run("apart", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			r := rep.request(now, "k", limits, 1e-6)
			if _, err := rep.l.Reserve(now, r); err != nil {
				b.Fatal(err)
			}
			p := c.Admit(ch)
			c.Release(ch, p, 1e-6, now)
			rep.l.Settle(now, r, false, 1e-6, 10)
		}
	})
}

// BenchmarkDispatchPreview is what a queue's dispatch waits for, with its
// lock held, to re-place ten waiting leaves (ten institutions): one read
// for all (PeekAll) against one read per leaf (Peek, as before).
//
//	go test ./redisstate -run '^$' -bench DispatchPreview
func BenchmarkDispatchPreview(b *testing.B) {
	rdb, prefix := testRedis(b)
	c := started(New(rdb, "bench", time.Hour, Options{Prefix: prefix}))
	var cs []*fairshare.Chain
	for i := range 10 {
		org := fmt.Sprintf("org%d", i)
		cs = append(cs, &fairshare.Chain{N: 2, Slots: []fairshare.Slot{c.Bind(org), c.Bind(org + "\x00team")},
			Res: []int64{4, 2}, Level: []bool{true, true}})
	}
	out := make([]fairshare.Placement, len(cs))
	b.Run("all", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			c.PeekAll(cs, out)
		}
	})
	b.Run("each", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			for i, ch := range cs {
				out[i] = c.Peek(ch)
			}
		}
	})
}

package redisstate

import (
	"testing"
	"time"
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

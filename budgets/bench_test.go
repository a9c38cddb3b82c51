package budgets

import (
	"testing"
	"time"
)

// BenchmarkReserveSettle is one admission and its settle on Mem: a key
// with RPM, TPM and max_inflight, budgets on organisation, team and key;
// "sliced" is the same while the ledger enforces a 1/3 slice (a Redis
// outage). Reserve must not allocate.
//
//	go test -run '^$' -bench ReserveSettle ./budgets
func BenchmarkReserveSettle(b *testing.B) {
	for _, tc := range []struct {
		name  string
		slice int64
	}{{"whole", 1}, {"sliced", 3}} {
		m := NewMem(time.Hour)
		m.Apply([]Budget{
			{Scope: Scope{KindOrg, "org", ""}, Period: Month, MaxCost: 1e6},
			{Scope: Scope{KindTeam, "team", ""}, Period: Day, MaxCost: 1e6},
			{Scope: Scope{KindKey, "key_1", ""}, Period: Day, MaxCost: 1e6},
		}, nil, t0)
		m.SetSlice(tc.slice)
		lim := KeyLimits{RPM: 1 << 30, TPM: 1 << 30, MaxInFlight: 1 << 20}
		b.Run(tc.name+"/serial", func(b *testing.B) {
			r := req(m, "m", 1e-6, 1e-9, 16)
			r.Key, r.Limits, r.Tokens = m.Key("key_1"), lim, 10
			b.ReportAllocs()
			for b.Loop() {
				if err := m.Reserve(t0, r); err != nil {
					b.Fatal(err)
				}
				m.Settle(t0, r, 1e-6, 10)
			}
		})
		b.Run(tc.name+"/parallel", func(b *testing.B) {
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				r := req(m, "m", 1e-6, 1e-9, 16)
				r.Key, r.Limits, r.Tokens = m.Key("key_1"), lim, 10
				for pb.Next() {
					if err := m.Reserve(t0, r); err != nil {
						b.Fatal(err)
					}
					m.Settle(t0, r, 1e-6, 10)
				}
			})
		})
	}
}

package store_test

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/go-llmflow/llmflow"
)

type roleSyncer interface {
	SaveSyncRoles(ctx context.Context, next llmflow.Accounts, run llmflow.SyncRun, changes []llmflow.RoleChange) (int64, error)
}

// firstImportRoles is the first role sync of a large centre: 40,000 Slurm
// users created, each a member of one of 900 teams, and 1,000
// coordinators (team_admin).
func firstImportRoles() []llmflow.RoleChange {
	var cs []llmflow.RoleChange
	for i := range 40_000 {
		u := fmt.Sprintf("u%05d", i)
		cs = append(cs, llmflow.RoleChange{Op: llmflow.OpCreateUser, User: u},
			llmflow.RoleChange{Op: llmflow.OpGrant, User: u, Grant: llmflow.RoleGrant{User: u, Role: "member", Team: fmt.Sprintf("team%03d", i%900)}})
		if i%40 == 0 {
			cs = append(cs, llmflow.RoleChange{Op: llmflow.OpGrant, User: u, Grant: llmflow.RoleGrant{User: u, Role: "team_admin", Team: fmt.Sprintf("team%03d", i%900)}})
		}
	}
	return cs
}

// benchRoleSync applies the first import's role changes (b.N times, each
// on a fresh store) and reports the time per change.
func benchRoleSync(b *testing.B, open func() roleSyncer) {
	cs := firstImportRoles()
	run := llmflow.SyncRun{Started: time.Now(), Finished: time.Now(), Source: "bench", Outcome: "applied"}
	for b.Loop() {
		b.StopTimer()
		s := open()
		b.StartTimer()
		if _, err := s.SaveSyncRoles(context.Background(), nil, run, cs); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(len(cs)), "ns/change")
}

func BenchmarkSQLite_RoleSyncFirstImport(b *testing.B) {
	benchRoleSync(b, func() roleSyncer { return MustOpenSQLite(b, filepath.Join(b.TempDir(), "llmflow.db")) })
}

func BenchmarkPostgres_RoleSyncFirstImport(b *testing.B) {
	benchRoleSync(b, func() roleSyncer { return MustOpenPostgres(b, pgSchema(b)) })
}

package doctor

import (
	"cmp"
	"context"
	"fmt"
	"strings"

	"github.com/go-llmflow/llmflow/config"
	"github.com/go-llmflow/llmflow/slurm"
	"github.com/go-llmflow/llmflow/slurmsync"
)

// checkSlurm reads the slurm block's account tree as `llmflow sync` does:
// sacctmgr present (or slurmdbd's database reachable) and the cluster
// known, with accounts.
func (r *run) checkSlurm(ctx context.Context) {
	sc := *r.cfg.Slurm
	fail := func(msg, fix string) { r.add(Finding{Check: "slurm", Status: Fail, Message: msg, Fix: fix}) }
	if sc.Source == "sacctmgr" {
		bin := cmp.Or(sc.SacctmgrPath, "sacctmgr")
		if _, err := r.o.LookPath(bin); err != nil {
			fail(fmt.Sprintf("sacctmgr: %v", err), "install Slurm's client commands on this host (Debian: slurm-client, with munge and slurm.conf naming slurmdbd), or set slurm { sacctmgr_path }")
			return
		}
	}
	if sc.Timeout == 0 || sc.Timeout > 2*r.o.Timeout {
		sc.Timeout = 2 * r.o.Timeout // sacctmgr may wait long for a slurmdbd that does not answer
	}
	src, name, closeSrc, err := slurmsync.Open(sc, nil)
	if err != nil {
		fail(err.Error(), "see the secrets finding, or fix the slurm block")
		return
	}
	defer closeSrc()
	t, err := src.Tree(ctx)
	switch {
	case err != nil && strings.Contains(err.Error(), "doesn't exist"):
		fail(fmt.Sprintf("%s: cluster %q is not known to slurmdbd: %v", name, sc.Cluster, err),
			"slurm { cluster } must be one of `sacctmgr show cluster`")
	case err != nil && sc.Source == "slurmdbd":
		fail(fmt.Sprintf("%s: %v", name, err), "check dsn_file (host, port, user, database slurm_acct_db) and that the user may SELECT there")
	case err != nil:
		fail(fmt.Sprintf("%s: %v", name, err), "run the same sacctmgr command as the service user: munge must run and slurm.conf name slurmdbd (AccountingStorageHost)")
	case len(t.Accounts) <= 1:
		fail(fmt.Sprintf("%s: cluster %q has no accounts under root", name, sc.Cluster),
			"check slurm { cluster } against `sacctmgr show cluster`, and add accounts (sacctmgr add account …)")
	default:
		r.add(Finding{Check: "slurm", Status: OK, Message: fmt.Sprintf("%s: %d accounts, %d user associations", name, len(t.Accounts), len(t.Users))})
	}
}

// checkWriteback connects to slurmdbd's database with the writeback
// block's DSN.
func (r *run) checkWriteback(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, r.o.Timeout)
	defer cancel()
	fail := func(msg, fix string) { r.add(Finding{Check: "writeback", Status: Fail, Message: msg, Fix: fix}) }
	dsn, err := config.ReadSecret(r.cfg.Writeback.DSNFile)
	if err != nil {
		fail("dsn_file: "+err.Error(), "see the secrets finding")
		return
	}
	db, err := slurm.Open(dsn)
	if err != nil {
		fail(err.Error(), "writeback { dsn_file } must hold user:password@tcp(host:3306)/slurm_acct_db")
		return
	}
	defer db.Close()
	if err := db.SQL().PingContext(ctx); err != nil {
		fail("slurmdbd's database: "+db.Redact(err.Error()), "check dsn_file (host, port, user, database) and the grants of `go doc ./writeback`")
		return
	}
	r.add(Finding{Check: "writeback", Status: OK, Message: "slurmdbd's database answers"})
}

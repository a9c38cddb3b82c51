// Package slurmtest runs the Slurm commands of the tests that use the
// lab's real slurmdbd (scripts/slurm/setup.sh). Only _test.go files
// import it.
package slurmtest

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// tries is how many times Run tries a command that slurmdbd failed as a
// whole.
const tries = 3

// Run runs name with args (TZ=UTC: the lab's slurmdbd runs in UTC) and
// returns its output, failing tb on an error. A request that slurmdbd
// refused as a whole (transient) is tried again: slurmdbd 22.05 fails
// one now and then, rolled back, while the tests of other packages send
// it theirs and its rollups run.
func Run(tb testing.TB, name string, args ...string) string {
	tb.Helper()
	var out []byte
	var err error
	for try := 1; try <= tries; try++ {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		c := exec.CommandContext(ctx, name, args...)
		c.Env = append(os.Environ(), "TZ=UTC")
		out, err = c.CombinedOutput()
		cancel()
		if err == nil {
			return string(out)
		}
		if !transient(out) {
			break
		}
		tb.Logf("%s %s: slurmdbd failed the request (try %d of %d): %s", name, strings.Join(args, " "), try, tries, bytes.TrimSpace(out))
		time.Sleep(time.Duration(try) * 200 * time.Millisecond)
	}
	tb.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	return ""
}

// Sacctmgr is Run of sacctmgr -i (commit without asking).
func Sacctmgr(tb testing.TB, args ...string) string {
	tb.Helper()
	return Run(tb, "sacctmgr", append([]string{"-i"}, args...)...)
}

// transient reports whether a command's output says slurmdbd failed the
// request itself, with no reason of the request's ("CONN:7 No error" in
// its log; the client's storage plugin prints
// "acct_storage_p_remove_users: No error"): nothing was changed, and the
// same request may succeed. An error the request caused (an unknown
// account, nothing to delete) is not transient.
func transient(out []byte) bool {
	return bytes.Contains(out, []byte("acct_storage_p_")) && bytes.Contains(out, []byte(": No error"))
}

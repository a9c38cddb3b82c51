package main

import (
	"bytes"
	"context"
	"flag"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/go-llmflow/llmflow/adminapi"
)

var update = flag.Bool("update", false, "rewrite golden files")

func golden(t *testing.T, name string, got []byte) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *update {
		os.MkdirAll("testdata", 0o755)
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run with -update to create it)", err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("%s differs:\n--- got\n%s\n--- want\n%s", name, got, want)
	}
}

var shareFixture = &adminapi.FairshareReport{Pools: []adminapi.PoolShare{{
	Pool: "b300", Scheduler: "priority", Capacity: 16, InFlight: 19, Borrowing: 3,
	Accounts: []adminapi.AccountShare{
		{Account: "root", RawUsage: 2.5, NormUsage: 1, EffectvUsage: 1, LevelFS: adminapi.Value(math.NaN()), FairShare: adminapi.Value(math.NaN()), Reserved: 16, InFlight: 19, Within: 16, Borrowing: 3},
		{Account: "root", User: "root", Depth: 1, RawShares: 5, NormShares: 0.227273, LevelFS: adminapi.Value(math.Inf(1)), FairShare: 1},
		{Account: "etaba", Depth: 1, RawShares: 13, NormShares: 0.8125, RawUsage: 2, NormUsage: 0.8, EffectvUsage: 0.8, LevelFS: 1.015625, FairShare: adminapi.Value(math.NaN()), Reserved: 13, InFlight: 15, Within: 13, Borrowing: 2},
		{Account: "lab-nlp", Depth: 2, RawShares: 60, NormShares: 0.6, RawUsage: 2, NormUsage: 0.8, EffectvUsage: 1, LevelFS: 0.6, FairShare: 0.5, Reserved: 8, InFlight: 15, Within: 13, Borrowing: 2},
		{Account: "lab-nlp", User: "alice", Depth: 3, RawShares: 5, NormShares: 0.065789, RawUsage: 1, NormUsage: 0.4, EffectvUsage: 0.5, LevelFS: 0.131578, FairShare: 0.4},
		{Account: "nlp-asr", Depth: 3, UseParent: true, NormShares: 0.6, LevelFS: adminapi.Value(math.NaN()), FairShare: adminapi.Value(math.NaN())},
		{Account: "etabb", Depth: 1, RawShares: 3, NormShares: 0.1875, RawUsage: 0.5, NormUsage: 0.2, EffectvUsage: 0.2, LevelFS: 0.9375, FairShare: adminapi.Value(math.NaN()), Reserved: 3, InFlight: 4, Within: 3, Borrowing: 1},
		{Account: "lab-chem", Depth: 2, RawShares: 100, NormShares: 1, LevelFS: adminapi.Value(math.Inf(1)), FairShare: 1, Reserved: 3, InFlight: 4, Within: 3, Borrowing: 1},
	},
}}}

func TestWriteShare(t *testing.T) {
	for _, tc := range []struct {
		name               string
		sep                string
		trailing, noHeader bool
	}{
		{"share.P.txt", "|", false, false},
		{"share.p.txt", "|", true, false},
		{"share.P.n.txt", "|", false, true},
		{"share.table.txt", "", false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var b bytes.Buffer
			if err := writeShare(&b, shareFixture, "", tc.sep, tc.trailing, tc.noHeader); err != nil {
				t.Fatal(err)
			}
			golden(t, tc.name, b.Bytes())
		})
	}
	if err := writeShare(new(bytes.Buffer), shareFixture, "nope", "|", false, false); err == nil {
		t.Error("an unknown pool gave no error")
	}
}

// llmflow share against a running gateway.
func TestShareCommand(t *testing.T) {
	e := startE2E(t)
	var out, errb bytes.Buffer
	code := Run(context.Background(), []string{"share", "--url", e.base, "--master-key-file", filepath.Join(e.dir, "master.key"), "-P"}, &out, &errb)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	want := []string{
		"Pool|Account|User|RawShares|NormShares|RawUsage|NormUsage|EffectvUsage|FairShare|LevelFS|Reserved|InFlight|Borrowing",
		"sim|root|||0.000000|0|",
		"sim| etabA||0.8125|0.812500|0|",
		"sim|  lab-nlp||1|1.000000|0|",
		"sim| etabB||0.1875|0.187500|0|",
		"sim|  lab-chem||1|1.000000|0|",
	}
	if len(lines) != len(want) {
		t.Fatalf("output:\n%s", out.String())
	}
	for i := range want {
		if !strings.HasPrefix(lines[i], want[i]) {
			t.Errorf("line %d %q, want prefix %q", i, lines[i], want[i])
		}
	}
	code = Run(context.Background(), []string{"share", "--url", e.base, "--master-key-file", filepath.Join(e.dir, "vllm.key")}, &out, &errb)
	if code == 0 || !strings.Contains(errb.String(), "401") {
		t.Errorf("wrong key: exit %d, %s", code, errb.String())
	}
	// The gateway's address from LLMFLOW_ADMIN_URL, as llmflow admin and
	// budgets read it; LLMFLOW_URL is not read (one name for all three).
	t.Setenv("LLMFLOW_URL", "http://127.0.0.1:1")
	t.Setenv("LLMFLOW_ADMIN_URL", e.base)
	out.Reset()
	errb.Reset()
	if code := Run(context.Background(), []string{"share", "--master-key-file", filepath.Join(e.dir, "master.key"), "-P"}, &out, &errb); code != 0 || !strings.HasPrefix(out.String(), want[0]) {
		t.Errorf("share with LLMFLOW_ADMIN_URL: exit %d, stdout %q, stderr %q", code, out.String(), errb.String())
	}
}

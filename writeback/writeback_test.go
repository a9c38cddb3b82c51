package writeback

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/go-llmflow/llmflow"
)

func TestHours(t *testing.T) {
	now := time.Date(2026, 11, 30, 10, 22, 0, 0, time.UTC)
	from, to := Hours(time.Date(2026, 11, 1, 5, 30, 0, 0, time.UTC), time.Date(2026, 11, 2, 7, 10, 0, 0, time.UTC), now)
	if !from.Equal(time.Date(2026, 11, 1, 5, 0, 0, 0, time.UTC)) || !to.Equal(time.Date(2026, 11, 2, 8, 0, 0, 0, time.UTC)) {
		t.Errorf("Hours = %s, %s", from, to)
	}
	if _, to := Hours(now.Add(-48*time.Hour), now.Add(time.Hour), now); !to.Equal(time.Date(2026, 11, 30, 10, 0, 0, 0, time.UTC)) {
		t.Errorf("to not clamped to the current hour: %s", to)
	}
}

func TestCalendar(t *testing.T) {
	paris, err := time.LoadLocation("Europe/Paris")
	if err != nil {
		t.Skip("no tzdata:", err)
	}
	// 2026-10-25 has 25 hours in Paris (CEST → CET).
	d := dayStart(time.Date(2026, 10, 25, 12, 0, 0, 0, time.UTC), paris)
	if d.UTC() != time.Date(2026, 10, 24, 22, 0, 0, 0, time.UTC) || nextDay(d).Sub(d) != 25*time.Hour {
		t.Errorf("day %s, next %s", d.UTC(), nextDay(d).UTC())
	}
	// 23:30 UTC on Oct 31 is already November in Paris.
	if m := monthStart(time.Date(2026, 10, 31, 23, 30, 0, 0, time.UTC), paris); m.UTC() != time.Date(2026, 10, 31, 23, 0, 0, 0, time.UTC) {
		t.Errorf("month %s", m.UTC())
	}
	from := time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)
	if err := checkZone(from, from.Add(24*time.Hour), paris); err != nil {
		t.Error(err)
	}
	kolkata, _ := time.LoadLocation("Asia/Kolkata")
	if err := checkZone(from, from.Add(time.Hour), kolkata); err == nil || !strings.Contains(err.Error(), "+330 minutes") {
		t.Errorf("Asia/Kolkata: %v", err)
	}
}

func TestPlanTree(t *testing.T) {
	tree := llmflow.Accounts{
		{Name: "EtabA", Kind: llmflow.KindOrg, Shares: 13},
		{Name: "lab-nlp", Kind: llmflow.KindTeam, Parent: "EtabA", Shares: 60, Members: []string{"alice"}},
		{Name: "nlp-llm", Kind: llmflow.KindProject, Parent: "lab-nlp", Shares: 70},
		{Name: "nlp-asr", Kind: llmflow.KindProject, Parent: "lab-nlp", UseParent: true},
		{Name: "lab-old", Kind: llmflow.KindTeam, Parent: "EtabA", Shares: 5, Disabled: true, Members: []string{"erin"}},
		{Name: "conf-org", Kind: llmflow.KindOrg, Shares: 0.6},
		{Name: "conf-org2", Kind: llmflow.KindOrg, Shares: 0.4},
	}
	chains := [][]string{{"etaba", "lab-nlp", "nlp-llm"}, {"etabc", "lab-new"}}
	used := [][2]string{{"nlp-llm", "alice"}, {"nlp-llm", "llmflow"}, {"lab-new", "llmflow"}}
	want, users, err := desiredTree(tree, chains, used)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := want["lab-old"]; ok {
		t.Error("a disabled account without usage is mirrored")
	}
	// Already there: etaba (re-shared), lab-nlp (other parent), alice in lab-nlp.
	have := []haveAssoc{
		{acct: "root", parent: ""}, {acct: "etaba", parent: "root", shares: 1},
		{acct: "lab-nlp", parent: "root", shares: 60}, {acct: "lab-nlp", user: "alice"},
	}
	var got []string
	for _, c := range planTree("llm", want, users, have) {
		got = append(got, c.String())
	}
	// Sibling groups with a fractional share (conf-org's, from a
	// configuration) are scaled by 1000, integers included (etaba); the
	// chain-only account etabc has 1.
	wantCmds := []string{
		"sacctmgr -i add account etabc cluster=llm parent=root fairshare=1",
		"sacctmgr -i add account conf-org2 cluster=llm parent=root fairshare=400",
		"sacctmgr -i add account conf-org cluster=llm parent=root fairshare=600",
		"sacctmgr -i add account lab-new cluster=llm parent=etabc fairshare=1",
		"sacctmgr -i add account nlp-llm cluster=llm parent=lab-nlp fairshare=70",
		"sacctmgr -i add account nlp-asr cluster=llm parent=lab-nlp fairshare=parent",
		"sacctmgr -i modify account where name=etaba cluster=llm set fairshare=13000",
		"sacctmgr -i modify account where name=lab-nlp cluster=llm set parent=etaba",
		"sacctmgr -i add user llmflow account=lab-new cluster=llm",
		"sacctmgr -i add user alice,llmflow account=nlp-llm cluster=llm",
	}
	if !slices.Equal(got, wantCmds) {
		t.Errorf("plan:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(wantCmds, "\n"))
	}
	if _, _, err := desiredTree(tree, nil, [][2]string{{"nlp-llm", "bad user"}}); err == nil {
		t.Error("a user name with a space is accepted")
	}
}

func TestOpenNeverShowsTheDSN(t *testing.T) {
	for _, dsn := range []string{"llmflow_wb:s3cr3t-pw@tcp(127.0.0.1:3306", "llmflow_wb:s3cr3t-pw@tcp(127.0.0.1:3306)/"} {
		_, err := Open(dsn, Config{GPUs: 8})
		if err == nil || strings.Contains(err.Error(), "s3cr3t") {
			t.Errorf("Open(%q): %v", dsn, err)
		}
	}
	if _, err := Open("u:p@tcp(127.0.0.1:3306)/slurm_acct_db", Config{}); err == nil || !strings.Contains(err.Error(), "GPU count") {
		t.Errorf("no GPUs: %v", err)
	}
	if _, err := Open("u:p@tcp(127.0.0.1:3306)/slurm_acct_db", Config{GPUs: 1, Cluster: "bad name"}); err == nil {
		t.Error("a cluster name with a space is accepted")
	}
}

// Slurm's root in llmflow's tree (it carries root's own user shares) is
// not an account to add: the cluster has its root.
func TestDesiredTreeSkipsRoot(t *testing.T) {
	tree := llmflow.Accounts{
		{Name: "root", Kind: llmflow.KindRoot, Users: []llmflow.UserAssoc{{User: "root", Shares: 5}}, Source: "slurm"},
		{Name: "uni", Kind: llmflow.KindOrg, Shares: 2, Source: "slurm"},
	}
	accts, _, err := desiredTree(tree, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := accts["root"]; ok || accts["uni"] == nil || accts["uni"].parent != "root" {
		t.Errorf("desired accounts %v", accts)
	}
}

package fairshare

import (
	"bufio"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// sshareRow is one row of `sshare -a -P -o Account,User,Partition,ID,...`.
type sshareRow struct {
	depth                                      int
	account, user, partition, id               string
	rawShares, normShares, rawUsage, normUsage string
	effUsage, fairShare, levelFS               string
}

func readSshare(t *testing.T, name string) []sshareRow {
	t.Helper()
	f, err := os.Open(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var rows []sshareRow
	sc := bufio.NewScanner(f)
	header := true
	for sc.Scan() {
		if header {
			header = false
			continue
		}
		line := sc.Text()
		depth := len(line) - len(strings.TrimLeft(line, " "))
		c := strings.Split(strings.TrimLeft(line, " "), "|")
		if len(c) < 11 {
			t.Fatalf("short line %q", line)
		}
		rows = append(rows, sshareRow{depth, c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7], c[8], c[9], c[10]})
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return rows
}

// readAssocUsage reads UsageRaw per association ID from
// `scontrol show assoc_mgr flags=assoc`: the same decayed usage as sshare's
// RawUsage column, printed with 2 decimals instead of truncated.
func readAssocUsage(t *testing.T) map[string]float64 {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", "scontrol-show-assoc.txt"))
	if err != nil {
		t.Fatal(err)
	}
	re := regexp.MustCompile(`(?m)ID=(\d+)\n.*\n\s+UsageRaw/Norm/Efctv=([0-9.]+)/`)
	m := map[string]float64{}
	for _, g := range re.FindAllStringSubmatch(string(b), -1) {
		v, err := strconv.ParseFloat(g[2], 64)
		if err != nil {
			t.Fatal(err)
		}
		m[g[1]] = v
	}
	return m
}

// buildSshareTree rebuilds the association tree from the capture's
// indentation and RawShares, with usage from usage(row).
func buildSshareTree(t *testing.T, rows []sshareRow, usage func(sshareRow) float64) (*TreeNode, []*TreeNode) {
	t.Helper()
	var nodes []*TreeNode
	var stack []*TreeNode // accounts by depth
	for i, r := range rows {
		n := &TreeNode{Name: r.account, User: r.user != "", Usage: usage(r)}
		if r.user != "" {
			n.Name = r.account + "/" + r.user
		}
		switch r.rawShares {
		case "":
		case "parent":
			n.UseParent = true
		default:
			v, err := strconv.ParseFloat(r.rawShares, 64)
			if err != nil {
				t.Fatalf("row %d: %v", i, err)
			}
			n.Shares = v
		}
		if i > 0 {
			parent := stack[r.depth-1]
			parent.Children = append(parent.Children, n)
		}
		if !n.User {
			stack = append(stack[:r.depth], n)
		}
		nodes = append(nodes, n)
	}
	return nodes[0], nodes
}

func fmtF(v float64) string {
	switch {
	case math.IsNaN(v):
		return ""
	case math.IsInf(v, 1):
		return "inf"
	}
	return fmt.Sprintf("%f", v)
}

// TestFairTreeSshare rebuilds the tree of the real `sshare -a -l -P` capture
// (Slurm 22.05.8) from its indentation and RawShares columns, with each user
// association's usage, and checks every column Fair Tree computes.
//
// sshare truncates RawUsage to an integer, too coarse for 6 decimals, so the
// usage comes from the same capture's `scontrol show assoc_mgr` (UsageRaw,
// 2 decimals); account usage is the sum of the children's, as Slurm
// accumulates it. The ±0.005 rounding of those inputs moves EffectvUsage and
// LevelFS by up to ~1e-4 relative, so those two are compared within 3e-4
// relative, everything else (NormShares, FairShare, inf, empty cells, the
// visit order) exactly as printed.
func TestFairTreeSshare(t *testing.T) {
	rows := readSshare(t, "sshare.format.P.txt")
	u := readAssocUsage(t)
	root, _ := buildSshareTree(t, rows, func(r sshareRow) float64 {
		v, ok := u[r.id]
		if !ok {
			t.Fatalf("no UsageRaw for association %s", r.id)
		}
		return v
	})
	SumUsage(root)
	res := FairTree(root)
	if len(res) != len(rows) {
		t.Fatalf("%d rows, want %d", len(res), len(rows))
	}
	near := func(got float64, want string) bool {
		if want == "" || want == "inf" {
			return fmtF(got) == want
		}
		w, err := strconv.ParseFloat(want, 64)
		if err != nil {
			return false
		}
		return math.Abs(got-w) <= 3e-4*math.Max(math.Abs(w), 1e-3)
	}
	for i, r := range res {
		w := rows[i]
		name := w.account + "|" + w.user + "|" + w.partition
		if got := fmtF(r.NormShares); got != w.normShares {
			t.Errorf("%s NormShares = %s, sshare %s", name, got, w.normShares)
		}
		if i > 0 && !near(r.NormUsage, w.normUsage) {
			t.Errorf("%s NormUsage = %s, sshare %s", name, fmtF(r.NormUsage), w.normUsage)
		}
		if !near(r.EffectvUsage, w.effUsage) {
			t.Errorf("%s EffectvUsage = %s, sshare %s", name, fmtF(r.EffectvUsage), w.effUsage)
		}
		if !near(r.LevelFS, w.levelFS) {
			t.Errorf("%s LevelFS = %s, sshare %s", name, fmtF(r.LevelFS), w.levelFS)
		}
		if got := fmtF(r.FairShare); got != w.fairShare {
			t.Errorf("%s FairShare = %s, sshare %s", name, got, w.fairShare)
		}
		// Slurm's identities: LevelFS = NormShares/EffectvUsage, FairShare ∈ {k/N}.
		if r.Node.User && !r.Node.UseParent && r.NormShares > 0 && r.EffectvUsage > 0 &&
			math.Abs(r.LevelFS-r.NormShares/r.EffectvUsage) > 1e-12 {
			t.Errorf("%s LevelFS != NormShares/EffectvUsage", name)
		}
		t.Logf("%-24s NS %s EU %s LF %-9s FS %s", name, fmtF(r.NormShares), fmtF(r.EffectvUsage), fmtF(r.LevelFS), fmtF(r.FairShare))
	}
	// Visit order: by FairShare descending, ties in tree order (sshare
	// prints carol|gpu before the tied carol and dave).
	var order []string
	for _, r := range res {
		if r.Visit >= 0 {
			for len(order) <= r.Visit {
				order = append(order, "")
			}
			order[r.Visit] = r.Node.Name
		}
	}
	want := []string{"lab-vision/dave", "lab-vision/bob", "lab-nlp/alice", "nlp-llm/bob", "nlp-llm/alice",
		"nlp-asr/bob", "lab-chem/carol", "lab-chem/dave", "lab-chem/carol", "root/root"}
	if strings.Join(order, " ") != strings.Join(want, " ") {
		t.Errorf("visit order %v, want %v", order, want)
	}
}

package gateway

import (
	"bufio"
	"context"
	"io"
	"math"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/go-llmflow/llmflow"
	"github.com/go-llmflow/llmflow/fairshare"
	"github.com/go-llmflow/llmflow/slurmsync"
)

// sshareCapture is a real Slurm 22.05.8 capture made with
// scripts/slurm/sshare-lab.sh (start, jobs, capture): Fairshare=parent at
// depths 1, 2 and 3, a project two levels below its team, user
// associations with shares (one Fairshare=parent, one on a partition) and
// root's own user association with a share.
const sshareCapture = "../testdata/slurm/sshare-fairtree"

// sshareLine is one row of `sshare -a -P -o
// Account,User,Partition,ID,RawShares,NormShares,RawUsage,NormUsage,EffectvUsage,FairShare,LevelFS`.
type sshareLine struct {
	depth                                      int
	account, user, partition, id               string
	rawShares, normShares, rawUsage, normUsage string
	effUsage, fairShare, levelFS               string
	key                                        string // account|user|partition
}

func readSshareCapture(t *testing.T) []sshareLine {
	t.Helper()
	f, err := os.Open(filepath.Join(sshareCapture, "sshare.format.P.txt"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var rows []sshareLine
	sc := bufio.NewScanner(f)
	for first := true; sc.Scan(); first = false {
		if first {
			continue
		}
		line := sc.Text()
		c := strings.Split(strings.TrimLeft(line, " "), "|")
		if len(c) < 11 {
			t.Fatalf("short line %q", line)
		}
		rows = append(rows, sshareLine{len(line) - len(strings.TrimLeft(line, " ")),
			c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7], c[8], c[9], c[10], c[0] + "|" + c[1] + "|" + c[2]})
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return rows
}

// assocUsage reads UsageRaw by association ID from the same moment's
// `scontrol show assoc_mgr flags=assoc`: sshare's RawUsage, with 2
// decimals instead of truncated.
func assocUsage(t *testing.T) map[string]float64 {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(sshareCapture, "scontrol-show-assoc.txt"))
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

// TestFairTreeEqualsSshare imports the capture's tree the way `llmflow
// sync --from-sacctmgr` does (slurmsync), builds the gateway's fair-share
// tree from it (accountView.tree), gives every association Slurm's usage,
// and compares every row of the pool's state with sshare's: the same rows
// in the same order (accounts and users, indented alike), RawShares,
// NormShares and FairShare exactly as printed, EffectvUsage and LevelFS
// within the rounding of the 2-decimal usage input; and the gateway's
// borrower ranks follow sshare's FairShare order.
func TestFairTreeEqualsSshare(t *testing.T) {
	src := &slurmsync.Sacctmgr{Cluster: "s8fair", Files: map[slurmsync.Listing]string{
		slurmsync.Assocs:     filepath.Join(sshareCapture, "sacctmgr.assoc.withdeleted.P.txt"),
		slurmsync.LiveAssocs: filepath.Join(sshareCapture, "sacctmgr.assoc.P.txt"),
	}}
	tree, err := src.Tree(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	accts, err := slurmsync.Map(tree)
	if err != nil {
		t.Fatal(err)
	}
	_, accts = slurmsync.Diff(nil, accts)
	view := newAccountView(accts, "salt")

	want := readSshareCapture(t)
	usage := assocUsage(t)
	now := time.Date(2026, 12, 1, 6, 0, 0, 0, time.UTC)
	pool := fairshare.NewPool(16, view.tree(), time.Hour, now)

	// Every association's usage, by its path in the pool's tree.
	var entries []fairshare.UsageEntry
	var stack []string // account path by depth (depth 1 = organisation)
	for i, r := range want {
		u, ok := usage[r.id]
		if !ok {
			t.Fatalf("no UsageRaw for association %s (%s)", r.id, r.key)
		}
		switch {
		case i == 0:
			entries = append(entries, fairshare.UsageEntry{Path: []string{}, GPUHours: u})
			continue
		case r.user != "":
			p := append(append([]string(nil), stack[:r.depth-1]...), fairshare.UserElem(r.user, r.partition))
			entries = append(entries, fairshare.UsageEntry{Path: p, GPUHours: u})
		default:
			stack = append(stack[:r.depth-1], r.account)
			entries = append(entries, fairshare.UsageEntry{Path: append([]string(nil), stack...), GPUHours: u})
		}
	}
	pool.RestoreUsage(entries, now, now)
	snap := pool.Snapshot(now)

	if len(snap.Rows) != len(want)-1 {
		t.Fatalf("%d rows, sshare has %d (root aside)", len(snap.Rows), len(want)-1)
	}
	near := func(got fairshare.Value, want string) bool {
		if want == "" || want == "inf" {
			return got.String() == want
		}
		w, err := strconv.ParseFloat(want, 64)
		return err == nil && math.Abs(float64(got)-w) <= 3e-4*math.Max(math.Abs(w), 1e-3)
	}
	byKey := map[string]fairshare.Row{}
	for i, r := range snap.Rows {
		acct, user := r.Name, ""
		if r.User {
			acct, user = "root", r.Name
			if len(r.Path) > 1 {
				acct = r.Path[len(r.Path)-2]
			}
		}
		key := acct + "|" + user + "|" + r.Partition
		byKey[key] = r
		w := want[i+1]
		// Same order as sshare, except that Slurm lists one user's
		// partition associations in creation (lft) order and llmflow by
		// partition: compare those by key.
		if key != w.key && !(user != "" && w.user == user && w.account == acct) {
			t.Errorf("row %d is %s, sshare has %s", i+1, key, w.key)
		}
		if r.Depth != w.depth {
			t.Errorf("%s depth %d, sshare %d", key, r.Depth, w.depth)
		}
	}
	for _, w := range want[1:] {
		r, ok := byKey[w.key]
		if !ok {
			t.Errorf("sshare row %s missing", w.key)
			continue
		}
		raw := strconv.FormatFloat(r.RawShares, 'f', -1, 64)
		if r.UseParent {
			raw = "parent"
		}
		if raw != w.rawShares {
			t.Errorf("%s RawShares %s, sshare %s", w.key, raw, w.rawShares)
		}
		if got := r.NormShares.String(); got != w.normShares {
			t.Errorf("%s NormShares %s, sshare %s", w.key, got, w.normShares)
		}
		if !near(r.NormUsage, w.normUsage) {
			t.Errorf("%s NormUsage %s, sshare %s", w.key, r.NormUsage, w.normUsage)
		}
		if !near(r.EffectvUsage, w.effUsage) {
			t.Errorf("%s EffectvUsage %s, sshare %s", w.key, r.EffectvUsage, w.effUsage)
		}
		if !near(r.LevelFS, w.levelFS) {
			t.Errorf("%s LevelFS %s, sshare %s", w.key, r.LevelFS, w.levelFS)
		}
		if got := r.FairShare.String(); got != w.fairShare {
			t.Errorf("%s FairShare %s, sshare %s", w.key, got, w.fairShare)
		}
		t.Logf("%-28s NS %s EU %-8s LF %-8s FS %-8s rank %d", w.key, r.NormShares, r.EffectvUsage, r.LevelFS, r.FairShare, r.Rank)
	}
	if snap.Leaves != len(userKeys(want)) {
		t.Errorf("%d leaves ranked, sshare ranks %d users", snap.Leaves, len(userKeys(want)))
	}
	// The borrower ranks the gateway puts in priorities follow sshare's
	// FairShare: a higher FairShare never gets a worse rank.
	users := userKeys(want)
	for _, a := range users {
		for _, b := range users {
			fa, _ := strconv.ParseFloat(want[a].fairShare, 64)
			fb, _ := strconv.ParseFloat(want[b].fairShare, 64)
			if fa > fb && byKey[want[a].key].Rank > byKey[want[b].key].Rank {
				t.Errorf("%s (FairShare %v) has rank %d, worse than %s (FairShare %v) rank %d",
					want[a].key, fa, byKey[want[a].key].Rank, want[b].key, fb, byKey[want[b].key].Rank)
			}
		}
	}
}

// userKeys are the indexes of sshare's user rows.
func userKeys(rows []sshareLine) []int {
	var out []int
	for i, r := range rows {
		if r.user != "" {
			out = append(out, i)
		}
	}
	return out
}

// TestKeyCountsAtItsOwner: a request of a key with an owner counts at the
// owner's user association in the key's project (any depth below the
// team), one without owner (or an owner without association there) at the
// account; usage goes up the whole chain.
func TestKeyCountsAtItsOwner(t *testing.T) {
	accts := llmflow.Accounts{
		{Name: "root", Kind: llmflow.KindRoot, Users: []llmflow.UserAssoc{{User: "root", Shares: 5}}},
		{Name: "uni", Kind: llmflow.KindOrg, Shares: 10},
		{Name: "team", Kind: llmflow.KindTeam, Parent: "uni", Shares: 60, Users: []llmflow.UserAssoc{{User: "ann", Shares: 5}}},
		{Name: "proj", Kind: llmflow.KindProject, Parent: "team", UseParent: true},
		{Name: "sub", Kind: llmflow.KindProject, Parent: "proj", Shares: 30,
			Users: []llmflow.UserAssoc{{User: "ann", Shares: 4}, {User: "cat", Shares: 2}}},
	}
	now := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	p := fairshare.NewPool(8, newAccountView(accts, "s").tree(), time.Hour, now)
	charge := func(path fairshare.Path, g float64) { p.Done(p.Admit(path, 0), g, now) }
	charge(fairshare.Path{Org: "uni", Team: "team", Project: "sub", User: "cat"}, 4)
	charge(fairshare.Path{Org: "uni", Team: "team", Project: "sub"}, 2)               // no owner: at sub
	charge(fairshare.Path{Org: "uni", Team: "team", Project: "sub", User: "zed"}, 1)  // owner without association: at sub
	charge(fairshare.Path{Org: "uni", Team: "team", User: "ann"}, 8)                  // ann in team
	charge(fairshare.Path{Org: "uni", Team: "team", Project: "nope", User: "ann"}, 1) // unknown project: the team
	got := map[string]float64{}
	for _, r := range p.Snapshot(now).Rows {
		got[strings.Join(r.Path, "/")] = r.RawUsage
	}
	want := map[string]float64{
		"\x01root": 0, "uni": 16, "uni/team": 16, "uni/team/\x01ann": 9, "uni/team/proj": 7,
		"uni/team/proj/sub": 7, "uni/team/proj/sub/\x01ann": 0, "uni/team/proj/sub/\x01cat": 4,
	}
	for k, w := range want {
		if g, ok := got[k]; !ok || math.Abs(g-w) > 1e-9 {
			t.Errorf("usage of %q = %v (present %v), want %v", k, g, ok, w)
		}
	}
	if len(got) != len(want) {
		t.Errorf("rows %v, want %v", got, want)
	}
}

// TestRequestCountsAtOwner: through the HTTP path, a request of a key
// owned by alice is in flight (and then charged) at alice's user
// association under the key's team; a key without owner at the team.
func TestRequestCountsAtOwner(t *testing.T) {
	up := newHeldUpstream(t)
	e := newEnv(t, []string{up.srv.URL}, "")
	accts := e.cfg.Accounts()
	for i := range accts {
		if accts[i].Name == "lab-nlp" {
			accts[i].Users = []llmflow.UserAssoc{{User: "alice", Shares: 5}, {User: "bob", Shares: 5}}
		}
	}
	e.gw.SetAccounts(accts)
	_, alice, err := e.gw.CreateKey(t.Context(), KeyRequest{Team: "lab-nlp", Name: "a", Owner: "alice"}, Principal{Name: "t", Role: RoleProxyAdmin})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	for _, key := range []string{alice, e.key} {
		go func() {
			req, _ := http.NewRequest(http.MethodPost, e.srv.URL+"/v1/chat/completions", strings.NewReader(`{"model":"m","messages":[]}`))
			req.Header.Set("Authorization", "Bearer "+key)
			if resp, err := e.srv.Client().Do(req); err == nil {
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
			}
			done <- struct{}{}
		}()
	}
	up.waitArrived(t, 2)
	inflight := map[string]int{}
	for _, a := range e.gw.FairshareReport().Pools[0].Accounts {
		inflight[a.Account+"|"+a.User] = a.InFlight
	}
	if inflight["lab-nlp|alice"] != 1 || inflight["lab-nlp|bob"] != 0 || inflight["lab-nlp|"] != 2 {
		t.Errorf("in flight %v: want alice's request at lab-nlp|alice, both at lab-nlp", inflight)
	}
	close(up.release)
	<-done
	<-done
	e.recs.wait(t, 2)
	var aliceUsage, teamUsage float64
	for _, a := range e.gw.FairshareReport().Pools[0].Accounts {
		switch a.Account + "|" + a.User {
		case "lab-nlp|alice":
			aliceUsage = a.RawUsage
		case "lab-nlp|":
			teamUsage = a.RawUsage
		}
	}
	if aliceUsage <= 0 || teamUsage <= aliceUsage {
		t.Errorf("usage alice %v, team %v: want alice's charged to her association and both to the team", aliceUsage, teamUsage)
	}
}

// TestGrpTRESCapsAccount: an account's Slurm GPU limit (GrpTRES
// gres/gpu=1 of a pool of 8 GPUs and C 16: 2 in flight) refuses its third
// request in flight with 429 and Retry-After, counted as grp_tres, while
// another organisation is served; once one finishes, it is served again.
func TestGrpTRESCapsAccount(t *testing.T) {
	up := newHeldUpstream(t)
	e := newEnv(t, []string{up.srv.URL}, "", func(o *Options) { o.Config.Pools[0].GPUs = 8 })
	accts := e.cfg.Accounts()
	for i := range accts {
		if accts[i].Name == "lab-nlp" {
			accts[i].Limits = llmflow.GPULimits{GPUs: 1, HasGPUs: true}
		}
	}
	e.gw.SetAccounts(accts)
	chem := e.newKey(t, "lab-chem")
	send := func(key string) chan int {
		c := make(chan int, 1)
		go func() {
			// bounded: without the cap the third request would wait for
			// the held upstream and the test fail, not hang
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			req, _ := http.NewRequestWithContext(ctx, http.MethodPost, e.srv.URL+"/v1/chat/completions", strings.NewReader(`{"model":"m","messages":[]}`))
			req.Header.Set("Authorization", "Bearer "+key)
			resp, err := e.srv.Client().Do(req)
			if err != nil {
				c <- 0
				return
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode == 429 && resp.Header.Get("Retry-After") == "" {
				t.Error("429 without Retry-After")
			}
			c <- resp.StatusCode
		}()
		return c
	}
	first, second := send(e.key), send(e.key)
	up.waitArrived(t, 2)
	if code := <-send(e.key); code != 429 {
		t.Fatalf("third request of lab-nlp in flight: %d, want 429", code)
	}
	other := send(chem) // etabB has no limit
	up.waitArrived(t, 3)
	close(up.release)
	for _, c := range []chan int{first, second, other} {
		if code := <-c; code != 200 {
			t.Fatalf("held request: %d", code)
		}
	}
	if code := <-send(e.key); code != 200 {
		t.Fatalf("after the others finished: %d", code)
	}
	if n := metricValue(e.metricsText(t), `llmflow_denied_total{reason="grp_tres"}`); n != 1 {
		t.Errorf("llmflow_denied_total{reason=grp_tres} = %v, want 1", n)
	}
}

// TestGrpTRESCapsUserAssociation: a user association's GPU limit (Slurm's
// GrpTRES gres/gpu=1 on alice in lab-nlp, a pool of 8 GPUs and C 16: 2 in
// flight) caps the requests of the keys alice owns in lab-nlp, naming her
// association; a key of lab-nlp owned by nobody is not capped by it.
func TestGrpTRESCapsUserAssociation(t *testing.T) {
	up := newHeldUpstream(t)
	e := newEnv(t, []string{up.srv.URL}, "", func(o *Options) { o.Config.Pools[0].GPUs = 8 })
	accts := e.cfg.Accounts()
	for i := range accts {
		if accts[i].Name == "lab-nlp" {
			accts[i].Users = []llmflow.UserAssoc{{User: "alice", Shares: 1, Limits: llmflow.GPULimits{GPUs: 1, HasGPUs: true}}}
		}
	}
	e.gw.SetAccounts(accts)
	_, alice, err := e.gw.CreateKey(t.Context(), KeyRequest{Team: "lab-nlp", Name: "a", Owner: "Alice"}, Principal{Name: "t", Role: RoleProxyAdmin})
	if err != nil {
		t.Fatal(err)
	}
	send := func(key string) chan int {
		c := make(chan int, 1)
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			req, _ := http.NewRequestWithContext(ctx, http.MethodPost, e.srv.URL+"/v1/chat/completions", strings.NewReader(`{"model":"m","messages":[]}`))
			req.Header.Set("Authorization", "Bearer "+key)
			resp, err := e.srv.Client().Do(req)
			if err != nil {
				c <- 0
				return
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode == 429 && !strings.Contains(string(b), `user \"alice\" in account \"lab-nlp\"`) {
				t.Errorf("429 not naming the association: %s", b)
			}
			c <- resp.StatusCode
		}()
		return c
	}
	held := []chan int{send(alice), send(alice)}
	up.waitArrived(t, 2)
	if code := <-send(alice); code != 429 {
		t.Fatalf("alice's third request in flight: %d, want 429", code)
	}
	held = append(held, send(e.key)) // lab-nlp's key without owner: not alice's
	up.waitArrived(t, 3)
	close(up.release)
	for _, c := range held {
		if code := <-c; code != 200 {
			t.Fatalf("held request: %d", code)
		}
	}
}

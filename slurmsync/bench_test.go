package slurmsync

import (
	"bufio"
	"context"
	"database/sql"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-llmflow/llmflow/sacctmgr"
)

// Scale: 10,000 accounts (100 organisations x 9 teams x 10 projects, plus
// root) and 100,000 user associations, 1 % of the projects deleted.
const (
	benchOrgs, benchTeams, benchProjects = 100, 9, 10
	benchUserAssocs                      = 100_000
	benchCluster                         = "bench"
)

// genTree generates the scale tree in canonical order.
func genTree() *sacctmgr.Tree {
	t := &sacctmgr.Tree{Cluster: benchCluster}
	t.Accounts = append(t.Accounts, sacctmgr.Account{Name: "root", Description: "default root account", Organization: "root", Shares: 1})
	t.Users = append(t.Users, sacctmgr.User{Name: "root", Account: "root", Shares: 1, Default: true})
	var leaves []string // teams and projects get users
	deleted := map[string]bool{}
	n := 0
	for o := range benchOrgs {
		org := fmt.Sprintf("org%03d", o)
		t.Accounts = append(t.Accounts, sacctmgr.Account{Name: org, Parent: "root", Description: "organisation " + org, Organization: org, Shares: uint32(1 + o%13)})
		for tm := range benchTeams {
			team := fmt.Sprintf("%s-team%d", org, tm)
			t.Accounts = append(t.Accounts, sacctmgr.Account{Name: team, Parent: org, Description: "team | " + team, Organization: org, Shares: uint32(10 + tm)})
			leaves = append(leaves, team)
			for p := range benchProjects {
				n++
				proj := fmt.Sprintf("%s-p%d", team, p)
				a := sacctmgr.Account{Name: proj, Parent: team, Description: "project " + proj, Organization: org, Shares: uint32(1 + p)}
				if n%7 == 0 {
					a.UseParent, a.Shares = true, sacctmgr.ParentShares
				}
				if n%100 == 50 {
					a.Deleted, a.Shares, a.UseParent = true, 1, false
					deleted[proj] = true
				}
				t.Accounts = append(t.Accounts, a)
				leaves = append(leaves, proj)
			}
		}
	}
	seen := map[string]bool{}
	for i := 0; len(t.Users) < benchUserAssocs; i++ {
		acct := leaves[i%len(leaves)]
		name := fmt.Sprintf("u%05d", (i*7919)%40000)
		u := sacctmgr.User{Name: name, Account: acct, Shares: uint32(1 + i%50)}
		if i%9 == 0 {
			u.UseParent, u.Shares = true, sacctmgr.ParentShares
		}
		if i%40 == 3 {
			u.Partition = "gpu"
		}
		k := name + "/" + acct + "/" + u.Partition
		if seen[k] {
			continue
		}
		seen[k] = true
		if deleted[acct] {
			u.Deleted, u.Shares, u.UseParent = true, 1, false
		} else if !seen[name] && u.Partition == "" {
			u.Default, seen[name] = true, true
		}
		t.Users = append(t.Users, u)
	}
	// Coordinators: one per organisation, one on every third team, and
	// redundant ones (an organisation's coordinator on one of its teams,
	// on a deleted project) that the reduction drops.
	for o := range benchOrgs {
		org := fmt.Sprintf("org%03d", o)
		t.Coords = append(t.Coords, sacctmgr.Coord{User: "c-" + org, Account: org}, sacctmgr.Coord{User: "c-" + org, Account: org + "-team1"})
		for tm := 0; tm < benchTeams; tm += 3 {
			t.Coords = append(t.Coords, sacctmgr.Coord{User: fmt.Sprintf("u%05d", o*10+tm), Account: fmt.Sprintf("%s-team%d", org, tm)})
		}
	}
	for proj := range deleted {
		t.Coords = append(t.Coords, sacctmgr.Coord{User: "u00001", Account: proj})
		break
	}
	t.CoordsKnown = true
	if err := Normalize(t); err != nil {
		panic(err)
	}
	return t
}

// writeListings writes the tree as the five sacctmgr listings.
func writeListings(t *sacctmgr.Tree, dir string) (map[Listing]string, error) {
	files := map[Listing]string{}
	byAcct := map[string][]sacctmgr.User{}
	for _, u := range t.Users {
		byAcct[u.Account] = append(byAcct[u.Account], u)
	}
	share := func(s uint32, up bool) string {
		if up {
			return "parent"
		}
		return fmt.Sprint(s)
	}
	write := func(l Listing, header string, rows func(w *bufio.Writer)) error {
		p := filepath.Join(dir, l.String()+".psv")
		f, err := os.Create(p)
		if err != nil {
			return err
		}
		w := bufio.NewWriter(f)
		w.WriteString(header + "\n")
		rows(w)
		if err := w.Flush(); err != nil {
			return err
		}
		files[l] = p
		return f.Close()
	}
	assocs := func(withDeleted bool) func(w *bufio.Writer) {
		return func(w *bufio.Writer) {
			for _, a := range t.Accounts {
				if a.Deleted && !withDeleted {
					continue
				}
				fmt.Fprintf(w, "%s|%s|||%s|%s\n", t.Cluster, a.Name, share(a.Shares, a.UseParent), a.Parent)
				for _, u := range byAcct[a.Name] {
					if u.Deleted && !withDeleted {
						continue
					}
					fmt.Fprintf(w, "%s|%s|%s|%s|%s|\n", t.Cluster, u.Account, u.Name, u.Partition, share(u.Shares, u.UseParent))
				}
			}
		}
	}
	hdr := "Cluster|Account|User|Partition|Share|ParentName"
	if err := write(Assocs, hdr, assocs(true)); err != nil {
		return nil, err
	}
	if err := write(LiveAssocs, hdr, assocs(false)); err != nil {
		return nil, err
	}
	if err := write(Defaults, "Cluster|Account|User|Partition", func(w *bufio.Writer) {
		for _, u := range t.Users {
			if u.Default {
				fmt.Fprintf(w, "%s|%s|%s|%s\n", t.Cluster, u.Account, u.Name, u.Partition)
			}
		}
	}); err != nil {
		return nil, err
	}
	if err := write(Descriptions, "Account|Descr", func(w *bufio.Writer) {
		for _, a := range t.Accounts {
			fmt.Fprintf(w, "%s|%s\n", a.Name, a.Description)
		}
	}); err != nil {
		return nil, err
	}
	if err := write(Organizations, "Account|Org", func(w *bufio.Writer) {
		for _, a := range t.Accounts {
			fmt.Fprintf(w, "%s|%s\n", a.Name, a.Organization)
		}
	}); err != nil {
		return nil, err
	}
	// As sacctmgr lists them: every live sub-account of a coordinated
	// account too.
	kids := map[string][]string{}
	for _, a := range t.Accounts {
		if !a.Deleted {
			kids[a.Parent] = append(kids[a.Parent], a.Name)
		}
	}
	byUser := map[string][]string{}
	var users []string
	for _, c := range t.Coords {
		if byUser[c.User] == nil {
			users = append(users, c.User)
		}
		var walk func(string)
		walk = func(a string) {
			byUser[c.User] = append(byUser[c.User], a)
			for _, k := range kids[a] {
				walk(k)
			}
		}
		walk(c.Account)
	}
	if err := write(Coordinators, "User|Def Acct|Admin|Coord Accounts", func(w *bufio.Writer) {
		for _, u := range users {
			fmt.Fprintf(w, "%s||None|%s\n", u, strings.Join(byUser[u], ","))
		}
	}); err != nil {
		return nil, err
	}
	return files, nil
}

// loadBenchDB bulk-loads the tree into acct_table and <cluster>_assoc_table
// (slurmdbd's schema, with lft/rgt) of the database of dsn.
func loadBenchDB(t *sacctmgr.Tree, dsn string) error {
	db, err := sql.Open("mysql", dsn)
	if err != nil {
		return err
	}
	defer db.Close()
	schema, err := os.ReadFile(filepath.Join(captures, "db/schema.sql"))
	if err != nil {
		return err
	}
	create := func(table, as string) string {
		s := string(schema)
		i := strings.Index(s, "CREATE TABLE `"+table+"`")
		j := strings.Index(s[i:], ";")
		return strings.Replace(s[i:i+j], "`"+table+"`", "`"+as+"`", 1)
	}
	assocTable := t.Cluster + "_assoc_table"
	for _, q := range []string{
		"DROP TABLE IF EXISTS acct_table", "DROP TABLE IF EXISTS `" + assocTable + "`", "DROP TABLE IF EXISTS acct_coord_table",
		create("acct_table", "acct_table"), create("hgx_assoc_table", assocTable), create("acct_coord_table", "acct_coord_table"),
	} {
		if _, err := db.Exec(q); err != nil {
			return err
		}
	}
	// lft/rgt: nested set in tree order.
	byAcct := map[string][]int{}
	for i, u := range t.Users {
		byAcct[u.Account] = append(byAcct[u.Account], i)
	}
	kids := map[string][]int{}
	for i, a := range t.Accounts {
		kids[a.Parent] = append(kids[a.Parent], i)
	}
	alft, argt := make([]int, len(t.Accounts)), make([]int, len(t.Accounts))
	ulft := make([]int, len(t.Users))
	next := 1
	var walk func(i int)
	walk = func(i int) {
		alft[i] = next
		next++
		for _, u := range byAcct[t.Accounts[i].Name] {
			ulft[u] = next
			next += 2
		}
		for _, k := range kids[t.Accounts[i].Name] {
			walk(k)
		}
		argt[i] = next
		next++
	}
	walk(0)
	now := time.Now().Unix()
	b2i := func(b bool) int {
		if b {
			return 1
		}
		return 0
	}
	shares := func(s uint32, up bool) uint32 {
		if up {
			return sacctmgr.ParentShares
		}
		return s
	}
	const chunk = 2000
	bulk := func(prefix string, n int, row func(i int) []any, ph string) error {
		for lo := 0; lo < n; lo += chunk {
			hi := min(lo+chunk, n)
			var sb strings.Builder
			sb.WriteString(prefix)
			args := make([]any, 0, (hi-lo)*10)
			for i := lo; i < hi; i++ {
				if i > lo {
					sb.WriteByte(',')
				}
				sb.WriteString(ph)
				args = append(args, row(i)...)
			}
			if _, err := db.Exec(sb.String(), args...); err != nil {
				return err
			}
		}
		return nil
	}
	if err := bulk("INSERT INTO acct_table (creation_time, mod_time, deleted, name, description, organization) VALUES ",
		len(t.Accounts), func(i int) []any {
			a := t.Accounts[i]
			return []any{now, now, 0, a.Name, a.Description, a.Organization}
		}, "(?,?,?,?,?,?)"); err != nil {
		return err
	}
	if err := bulk("INSERT INTO acct_coord_table (creation_time, mod_time, deleted, acct, user) VALUES ",
		len(t.Coords), func(i int) []any {
			return []any{now, now, 0, t.Coords[i].Account, t.Coords[i].User}
		}, "(?,?,?,?,?)"); err != nil {
		return err
	}
	ins := "INSERT INTO `" + assocTable + "` (creation_time, mod_time, deleted, is_def, user, acct, `partition`, parent_acct, lft, rgt, shares) VALUES "
	if err := bulk(ins, len(t.Accounts), func(i int) []any {
		a := t.Accounts[i]
		return []any{now, now, b2i(a.Deleted), 0, "", a.Name, "", a.Parent, alft[i], argt[i], shares(a.Shares, a.UseParent)}
	}, "(?,?,?,?,?,?,?,?,?,?,?)"); err != nil {
		return err
	}
	return bulk(ins, len(t.Users), func(i int) []any {
		u := t.Users[i]
		return []any{now, now, b2i(u.Deleted), b2i(u.Default), u.Name, u.Account, u.Partition, "", ulft[i], ulft[i] + 1, shares(u.Shares, u.UseParent)}
	}, "(?,?,?,?,?,?,?,?,?,?,?)")
}

var (
	benchOnce  sync.Once
	benchTree  *sacctmgr.Tree
	benchFiles map[Listing]string
	benchDSN   string
	benchErr   error
)

// benchSetup generates the tree, writes the listings to a temporary
// directory and loads the scratch database llmflow_test_bench (once per
// test binary run; kept afterwards for inspection).
func benchSetup(b *testing.B) {
	e := needSlurm(b)
	benchOnce.Do(func() {
		start := time.Now()
		benchTree = genTree()
		dir, err := os.MkdirTemp("", "slurmsync-bench")
		if err != nil {
			benchErr = err
			return
		}
		if benchFiles, benchErr = writeListings(benchTree, dir); benchErr != nil {
			return
		}
		benchDSN = scratchDB(b, e, "bench", true)
		benchErr = loadBenchDB(benchTree, benchDSN)
		b.Logf("generated and loaded %d accounts, %d user associations in %s",
			len(benchTree.Accounts), len(benchTree.Users), time.Since(start).Round(time.Millisecond))
	})
	if benchErr != nil {
		b.Fatal(benchErr)
	}
}

func BenchmarkImportSlurmDBD(b *testing.B) {
	benchSetup(b)
	s, err := NewSlurmDBD(benchDSN, benchCluster)
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	tr, err := s.Tree(context.Background())
	if err != nil {
		b.Fatal(err)
	}
	sameTree(b, "slurmdbd vs generated", tr, benchTree)
	b.ResetTimer()
	for b.Loop() {
		if _, err := s.Tree(context.Background()); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkImportSacctmgrText(b *testing.B) {
	benchSetup(b)
	s := &Sacctmgr{Cluster: benchCluster, Files: benchFiles}
	tr, err := s.Tree(context.Background())
	if err != nil {
		b.Fatal(err)
	}
	sameTree(b, "sacctmgr text vs generated", tr, benchTree)
	b.ResetTimer()
	for b.Loop() {
		if _, err := s.Tree(context.Background()); err != nil {
			b.Fatal(err)
		}
	}
}

// TestScaleBothSources checks the scale tree once outside benchmarks: both
// sources import it equal to the generated tree, each under 2 s.
func TestScaleBothSources(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: skipping the 110,000-association scale test")
	}
	e := needSlurm(t)
	tree := genTree()
	if len(tree.Accounts) != 1+benchOrgs*(1+benchTeams*(1+benchProjects)) || len(tree.Users) != benchUserAssocs {
		t.Fatalf("%d accounts, %d users", len(tree.Accounts), len(tree.Users))
	}
	files, err := writeListings(tree, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	dsn := scratchDB(t, e, fmt.Sprintf("scale_%d", os.Getpid()), false)
	if err := loadBenchDB(tree, dsn); err != nil {
		t.Fatal(err)
	}
	dbd, err := NewSlurmDBD(dsn, benchCluster)
	if err != nil {
		t.Fatal(err)
	}
	defer dbd.Close()
	for _, src := range []Source{dbd, &Sacctmgr{Cluster: benchCluster, Files: files}} {
		start := time.Now()
		got, err := src.Tree(context.Background())
		d := time.Since(start)
		if err != nil {
			t.Fatalf("%v: %v", src, err)
		}
		sameTree(t, fmt.Sprint(src), got, tree)
		t.Logf("%v: %s", src, d)
		if d > 2*time.Second && !raceEnabled {
			t.Errorf("%v: import took %s, target < 2 s", src, d)
		}
	}
}

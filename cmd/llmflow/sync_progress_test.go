package main

import (
	"bytes"
	"context"
	"fmt"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/go-llmflow/llmflow/internal/progress"
	"github.com/go-llmflow/llmflow/sacctmgr"
	"github.com/go-llmflow/llmflow/slurmsync"
	"github.com/go-llmflow/llmflow/store"
)

// slowSource is a Slurm source whose read lets the meter's ticker fire
// once: a read that takes more than a second.
type slowSource struct {
	tree  *sacctmgr.Tree
	ticks chan<- time.Time
}

func (s slowSource) Tree(context.Context) (*sacctmgr.Tree, error) {
	s.ticks <- time.Now()
	return s.tree.Clone(), nil
}

// TestSyncProgress: the line a sync with many changes draws on a
// terminal: the time reading the source takes, the associations read,
// the changes applied; then it is cleared, before the changes are printed.
// A second run, without change, applies nothing and says so.
func TestSyncProgress(t *testing.T) {
	ctx := context.Background()
	db, err := store.OpenSQLite(ctx, filepath.Join(t.TempDir(), "llmflow.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	tree := &sacctmgr.Tree{Cluster: "hgx", Accounts: []sacctmgr.Account{{Name: "root", Shares: 1}}}
	for i := range 40 {
		org := fmt.Sprintf("org%02d", i)
		tree.Accounts = append(tree.Accounts, sacctmgr.Account{Name: org, Parent: "root", Shares: 1})
		for j := range 5 {
			team := fmt.Sprintf("%s-team%d", org, j)
			tree.Accounts = append(tree.Accounts, sacctmgr.Account{Name: team, Parent: org, Shares: 10})
			tree.Users = append(tree.Users, sacctmgr.User{Name: fmt.Sprintf("u%02d%d", i, j), Account: team, Shares: 1})
		}
	}
	if err := slurmsync.Normalize(tree); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		want []string // the lines drawn, in turn
	}{
		{"ManyChanges", []string{`sync reading test:hgx: [0-9.]+m?s`, `sync reading test:hgx: 441/441 associations \(100%\), [0-9]+ associations/s`,
			`sync applying: 0/240 changes \(0%\)`, `sync applying: 240/240 changes \(100%\), [0-9]+ changes/s`, ``}},
		{"Unchanged", []string{`sync reading test:hgx: [0-9.]+m?s`, `sync reading test:hgx: 441/441 associations \(100%\), [0-9]+ associations/s`, ``}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var b bytes.Buffer
			ticks := make(chan time.Time)
			sm := &syncMeter{m: progress.NewAlwaysTicks(&b, "sync", "associations", 0, ticks)}
			s := &slurmsync.Syncer{Source: slowSource{tree, ticks}, Name: "test:hgx", Sink: db, Progress: sm.tell}
			_, err := s.Run(ctx, false)
			sm.done()
			if err != nil {
				t.Fatal(err)
			}
			got := strings.Split(b.String(), "\r\033[K")[1:]
			if len(got) != len(tc.want) {
				t.Fatalf("drew %q, want %d lines", got, len(tc.want))
			}
			for i, w := range tc.want {
				if !regexp.MustCompile("^" + w + "$").MatchString(got[i]) {
					t.Errorf("line %d: %q, want %s", i, got[i], w)
				}
			}
		})
	}
}

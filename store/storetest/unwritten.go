package storetest

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/go-llmflow/llmflow"
)

// UnwrittenStore keeps the usage the write-back could not write into
// slurmdbd, per cluster and hour.
type UnwrittenStore interface {
	// SaveUnwritten replaces the rows of cluster for the hours [from, to)
	// with rows (those of other hours are ignored).
	SaveUnwritten(ctx context.Context, cluster string, from, to time.Time, rows []llmflow.Unwritten) error
	// Unwritten returns the rows of cluster for the hours [from, to), by
	// hour, account and user.
	Unwritten(ctx context.Context, cluster string, from, to time.Time) ([]llmflow.Unwritten, error)
	// SaveAssocOrder replaces the association order of cluster;
	// AssocOrder returns it by lft.
	SaveAssocOrder(ctx context.Context, cluster string, order []llmflow.AssocLFT) error
	AssocOrder(ctx context.Context, cluster string) ([]llmflow.AssocLFT, error)
}

// RunUnwritten is the contract of UnwrittenStore.
func RunUnwritten(t *testing.T, open func(t *testing.T) UnwrittenStore) {
	s := open(t)
	ctx := t.Context()
	h := func(i int) time.Time { return time.Date(2026, 11, 20, i, 0, 0, 0, time.UTC) }
	row := func(i int, acct, user string, secs int64) llmflow.Unwritten {
		return llmflow.Unwritten{AssocHour: llmflow.AssocHour{Account: acct, User: user, Hour: h(i), AllocSecs: secs}, Reason: "account " + acct + " is deleted in slurmdbd"}
	}
	first := []llmflow.Unwritten{row(1, "gone", "alice", 3600), row(2, "gone", "alice", 1800), row(2, "old", "bob", 7), row(5, "gone", "", 1)}
	if err := s.SaveUnwritten(ctx, "llm", h(1), h(4), first); err != nil {
		t.Fatal(err)
	}
	if err := s.SaveUnwritten(ctx, "other", h(1), h(4), []llmflow.Unwritten{row(1, "x", "y", 9)}); err != nil {
		t.Fatal(err)
	}
	got, err := s.Unwritten(ctx, "llm", h(0), h(24))
	if err != nil {
		t.Fatal(err)
	}
	if want := first[:3]; !slices.Equal(got, want) { // hour 5 lies outside [1, 4)
		t.Fatalf("after the first write:\n got %+v\nwant %+v", got, want)
	}
	// re-writing hours 2 and 3 replaces what was said of them only
	if err := s.SaveUnwritten(ctx, "llm", h(2), h(4), []llmflow.Unwritten{row(3, "gone", "alice", 60)}); err != nil {
		t.Fatal(err)
	}
	got, err = s.Unwritten(ctx, "llm", h(0), h(24))
	if err != nil {
		t.Fatal(err)
	}
	if want := []llmflow.Unwritten{first[0], row(3, "gone", "alice", 60)}; !slices.Equal(got, want) {
		t.Fatalf("after re-writing hours 2–3:\n got %+v\nwant %+v", got, want)
	}
	if got, err = s.Unwritten(ctx, "llm", h(2), h(3)); err != nil || len(got) != 0 {
		t.Fatalf("hour 2: %+v %v, want none", got, err)
	}

	// the association order: replaced whole, per cluster, read by lft
	mustNil := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	mustNil(s.SaveAssocOrder(ctx, "llm", []llmflow.AssocLFT{{Account: "a", User: "u", LFT: 7}, {Account: "b", User: "u", LFT: 3}}))
	mustNil(s.SaveAssocOrder(ctx, "other", []llmflow.AssocLFT{{Account: "x", User: "y", LFT: 1}}))
	mustNil(s.SaveAssocOrder(ctx, "llm", []llmflow.AssocLFT{{Account: "a", User: "u", LFT: 9}, {Account: "c", User: "v", LFT: 5}}))
	order, err := s.AssocOrder(ctx, "llm")
	if want := []llmflow.AssocLFT{{Account: "c", User: "v", LFT: 5}, {Account: "a", User: "u", LFT: 9}}; err != nil || !slices.Equal(order, want) {
		t.Fatalf("association order %+v %v, want %+v", order, err, want)
	}
	if order, err := s.AssocOrder(ctx, "never"); err != nil || len(order) != 0 {
		t.Fatalf("a cluster never written: %+v %v", order, err)
	}
}

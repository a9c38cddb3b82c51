package storetest

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-llmflow/llmflow"
	"github.com/google/go-cmp/cmp"
)

// OutboxStore is what RunOutbox tests: the durable outbox that alerts are
// delivered from (see the store package's outbox contract).
type OutboxStore interface {
	// EnqueueOutbox stores msgs atomically, leaving alone those whose
	// (ID, Channel) exists; it returns the ones inserted.
	EnqueueOutbox(ctx context.Context, msgs []llmflow.OutboxMessage) ([]llmflow.OutboxMessage, error)
	// ClaimOutbox leases due, undelivered, unheld messages to a token.
	ClaimOutbox(ctx context.Context, c llmflow.OutboxClaim) ([]llmflow.OutboxMessage, error)
	// CompleteOutbox marks delivered under the holding token, else
	// llmflow.ErrLeaseLost.
	CompleteOutbox(ctx context.Context, id, channel, token string, at time.Time) error
	// RetryOutbox reschedules under the holding token, else
	// llmflow.ErrLeaseLost.
	RetryOutbox(ctx context.Context, id, channel, token string, next time.Time, lastErr string) error
	// PendingOutbox counts the undelivered messages per channel.
	PendingOutbox(ctx context.Context) (map[string]int64, error)
	// ListOutbox lists messages by CreatedAt, ID, Channel.
	ListOutbox(ctx context.Context, f llmflow.OutboxFilter) ([]llmflow.OutboxMessage, error)
}

// RunOutbox is the contract of OutboxStore. open creates a fresh, empty
// database and returns a function that opens a new handle on it (a new
// connection pool, as a second gateway or a restarted one would have);
// every handle is closed when the test ends.
func RunOutbox(t *testing.T, open func(t *testing.T) func() OutboxStore) {
	one := func(t *testing.T) OutboxStore { return open(t)() }
	t.Run("RoundTrip", func(t *testing.T) { testOutboxRoundTrip(t, one(t)) })
	t.Run("Idempotent", func(t *testing.T) { testOutboxIdempotent(t, one(t)) })
	t.Run("ErrInvalid", func(t *testing.T) { testOutboxInvalid(t, one(t)) })
	t.Run("Claim", func(t *testing.T) { testOutboxClaim(t, one(t)) })
	t.Run("LeaseExpires", func(t *testing.T) { testOutboxLease(t, one(t)) })
	t.Run("CompleteOnce", func(t *testing.T) { testOutboxComplete(t, one(t)) })
	t.Run("Retry", func(t *testing.T) { testOutboxRetry(t, one(t)) })
	t.Run("Reopen", func(t *testing.T) { testOutboxReopen(t, open(t)) })
	t.Run("ConcurrentEnqueue", func(t *testing.T) { testOutboxConcurrentEnqueue(t, open(t)) })
	t.Run("ConcurrentClaims", func(t *testing.T) { testOutboxConcurrentClaims(t, open(t)) })
}

// obase is a microsecond-aligned instant.
var obase = time.Date(2026, 12, 1, 8, 0, 0, 250000000, time.UTC)

func omsg(id, channel string, at time.Time) llmflow.OutboxMessage {
	return llmflow.OutboxMessage{ID: id, Channel: channel, Payload: []byte(`{"id":"` + id + `","n":"é"}`), CreatedAt: at}
}

func mustEnqueue(t *testing.T, s OutboxStore, msgs ...llmflow.OutboxMessage) []llmflow.OutboxMessage {
	t.Helper()
	in, err := s.EnqueueOutbox(t.Context(), msgs)
	if err != nil {
		t.Fatalf("EnqueueOutbox: %v", err)
	}
	return in
}

func mustClaim(t *testing.T, s OutboxStore, token string, now time.Time, lease time.Duration, limit int, channels ...string) []llmflow.OutboxMessage {
	t.Helper()
	if len(channels) == 0 {
		channels = []string{"webhook", "email"}
	}
	ms, err := s.ClaimOutbox(t.Context(), llmflow.OutboxClaim{Channels: channels, Now: now, LeaseUntil: now.Add(lease), Token: token, Limit: limit})
	if err != nil {
		t.Fatalf("ClaimOutbox: %v", err)
	}
	return ms
}

func mustList(t *testing.T, s OutboxStore, f llmflow.OutboxFilter) []llmflow.OutboxMessage {
	t.Helper()
	ms, err := s.ListOutbox(t.Context(), f)
	if err != nil {
		t.Fatalf("ListOutbox: %v", err)
	}
	return ms
}

func keys(ms []llmflow.OutboxMessage) []string {
	var out []string
	for _, m := range ms {
		out = append(out, m.ID+"/"+m.Channel)
	}
	return out
}

func testOutboxRoundTrip(t *testing.T, s OutboxStore) {
	if ms := mustList(t, s, llmflow.OutboxFilter{}); ms != nil {
		t.Fatalf("empty outbox lists %v", ms)
	}
	a := omsg("budget:1:2026-12-01T00:00:00Z:soft", "webhook", obase)
	b := omsg("budget:1:2026-12-01T00:00:00Z:soft", "email", obase)
	b.NextAttemptAt = obase.Add(time.Minute)
	in := mustEnqueue(t, s, a, b)
	if got := keys(in); !cmp.Equal(got, []string{a.ID + "/webhook", a.ID + "/email"}) {
		t.Fatalf("inserted %v", got)
	}
	got := mustList(t, s, llmflow.OutboxFilter{})
	a.NextAttemptAt = obase // zero means CreatedAt
	want := []llmflow.OutboxMessage{b, a}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("list (-want +got):\n%s", diff)
	}
	if got := mustList(t, s, llmflow.OutboxFilter{ID: "nope"}); got != nil {
		t.Errorf("filter by unknown id: %v", got)
	}
	if got := mustList(t, s, llmflow.OutboxFilter{Limit: 1}); len(got) != 1 {
		t.Errorf("limit 1: %d messages", len(got))
	}
	p, err := s.PendingOutbox(t.Context())
	if err != nil || !cmp.Equal(p, map[string]int64{"webhook": 1, "email": 1}) {
		t.Errorf("pending %v, %v", p, err)
	}
}

func testOutboxIdempotent(t *testing.T, s OutboxStore) {
	a := omsg("a", "webhook", obase)
	mustEnqueue(t, s, a)
	again := a
	again.Payload = []byte(`{"changed":true}`)
	again.CreatedAt = obase.Add(time.Hour)
	if in := mustEnqueue(t, s, again, again); in != nil {
		t.Fatalf("second enqueue inserted %v", keys(in))
	}
	// delivered, then enqueued again: still delivered, still one row
	c := mustClaim(t, s, "t1", obase, time.Minute, 10)
	if err := s.CompleteOutbox(t.Context(), "a", "webhook", "t1", obase.Add(time.Second)); err != nil || len(c) != 1 {
		t.Fatal(c, err)
	}
	if in := mustEnqueue(t, s, again); in != nil {
		t.Fatalf("enqueue after delivery inserted %v", keys(in))
	}
	got := mustList(t, s, llmflow.OutboxFilter{ID: "a"})
	if len(got) != 1 || string(got[0].Payload) != string(a.Payload) || !got[0].CreatedAt.Equal(obase) || !got[0].Delivered() {
		t.Errorf("after re-enqueues: %+v", got)
	}
	if ms := mustClaim(t, s, "t2", obase.Add(time.Hour), time.Minute, 10); ms != nil {
		t.Errorf("a delivered message was claimed again: %v", keys(ms))
	}
}

func testOutboxInvalid(t *testing.T, s OutboxStore) {
	good := omsg("ok", "webhook", obase)
	for name, m := range map[string]llmflow.OutboxMessage{
		"NoID":       omsg("", "webhook", obase),
		"LongID":     omsg(strings.Repeat("x", llmflow.MaxOutboxIDBytes+1), "webhook", obase),
		"NoChannel":  omsg("x", "", obase),
		"NoTime":     omsg("x", "webhook", time.Time{}),
		"BadUTF8":    {ID: "x", Channel: "webhook", Payload: []byte{0xff}, CreatedAt: obase},
		"BigPayload": {ID: "x", Channel: "webhook", Payload: make([]byte, llmflow.MaxOutboxPayloadBytes+1), CreatedAt: obase},
	} {
		_, err := s.EnqueueOutbox(t.Context(), []llmflow.OutboxMessage{good, m})
		if llmflow.ErrorCode(err) != llmflow.EINVALID {
			t.Errorf("%s: %v, want EINVALID", name, err)
		}
	}
	if got := mustList(t, s, llmflow.OutboxFilter{}); got != nil {
		t.Errorf("a refused batch stored %v", keys(got))
	}
	for name, c := range map[string]llmflow.OutboxClaim{
		"NoChannel": {Now: obase, LeaseUntil: obase.Add(time.Minute), Token: "t", Limit: 1},
		"NoToken":   {Channels: []string{"webhook"}, Now: obase, LeaseUntil: obase.Add(time.Minute), Limit: 1},
		"NoLease":   {Channels: []string{"webhook"}, Now: obase, LeaseUntil: obase, Token: "t", Limit: 1},
		"NoLimit":   {Channels: []string{"webhook"}, Now: obase, LeaseUntil: obase.Add(time.Minute), Token: "t"},
	} {
		if _, err := s.ClaimOutbox(t.Context(), c); llmflow.ErrorCode(err) != llmflow.EINVALID {
			t.Errorf("claim %s: %v, want EINVALID", name, err)
		}
	}
	for _, tok := range []string{"", "nobody"} {
		if err := s.CompleteOutbox(t.Context(), "ok", "webhook", tok, obase); !errors.Is(err, llmflow.ErrLeaseLost) {
			t.Errorf("complete with token %q: %v, want ErrLeaseLost", tok, err)
		}
		if err := s.RetryOutbox(t.Context(), "ok", "webhook", tok, obase, "x"); !errors.Is(err, llmflow.ErrLeaseLost) {
			t.Errorf("retry with token %q: %v, want ErrLeaseLost", tok, err)
		}
	}
}

func testOutboxClaim(t *testing.T, s OutboxStore) {
	mustEnqueue(t, s,
		omsg("c", "webhook", obase.Add(2*time.Second)),
		omsg("a", "webhook", obase),
		omsg("b", "email", obase.Add(time.Second)),
		omsg("later", "webhook", obase.Add(time.Hour)),
		omsg("sms", "sms", obase),
	)
	now := obase.Add(time.Minute)
	got := mustClaim(t, s, "tok1", now, time.Minute, 2)
	if !cmp.Equal(keys(got), []string{"a/webhook", "b/email"}) {
		t.Fatalf("first claim %v, want the two most due of the channels asked", keys(got))
	}
	for _, m := range got {
		if m.Attempts != 1 || m.LeaseToken != "tok1" || !m.LeaseUntil.Equal(now.Add(time.Minute)) || m.Delivered() {
			t.Errorf("claimed %+v", m)
		}
	}
	got = mustClaim(t, s, "tok2", now, time.Minute, 10)
	if !cmp.Equal(keys(got), []string{"c/webhook"}) {
		t.Fatalf("second claim %v, want only what is due and unheld", keys(got))
	}
	if got := mustClaim(t, s, "tok3", now, time.Minute, 10, "sms"); !cmp.Equal(keys(got), []string{"sms/sms"}) {
		t.Fatalf("claim of sms %v", keys(got))
	}
	if got := mustClaim(t, s, "tok4", now, time.Minute, 10); got != nil {
		t.Fatalf("everything is held, yet claimed %v", keys(got))
	}
}

func testOutboxLease(t *testing.T, s OutboxStore) {
	mustEnqueue(t, s, omsg("a", "webhook", obase))
	if got := mustClaim(t, s, "crashed", obase, time.Minute, 1); len(got) != 1 {
		t.Fatal(got)
	}
	if got := mustClaim(t, s, "other", obase.Add(time.Minute-time.Microsecond), time.Minute, 1); got != nil {
		t.Fatalf("claimed before the lease expired: %v", keys(got))
	}
	got := mustClaim(t, s, "other", obase.Add(time.Minute), time.Minute, 1)
	if len(got) != 1 || got[0].Attempts != 2 || got[0].LeaseToken != "other" {
		t.Fatalf("after expiry: %+v", got)
	}
	// the crashed dispatcher comes back: it may neither complete nor retry
	if err := s.CompleteOutbox(t.Context(), "a", "webhook", "crashed", obase.Add(2*time.Minute)); !errors.Is(err, llmflow.ErrLeaseLost) {
		t.Errorf("stale complete: %v, want ErrLeaseLost", err)
	}
	if err := s.RetryOutbox(t.Context(), "a", "webhook", "crashed", obase, "x"); !errors.Is(err, llmflow.ErrLeaseLost) {
		t.Errorf("stale retry: %v, want ErrLeaseLost", err)
	}
	// the holder completes even after its own lease ran out, as long as
	// nobody claimed the message meanwhile
	if err := s.CompleteOutbox(t.Context(), "a", "webhook", "other", obase.Add(time.Hour)); err != nil {
		t.Errorf("complete by the holder after expiry: %v", err)
	}
}

func testOutboxComplete(t *testing.T, s OutboxStore) {
	mustEnqueue(t, s, omsg("a", "webhook", obase), omsg("a", "email", obase))
	mustClaim(t, s, "tok", obase, time.Minute, 10)
	at := obase.Add(1500 * time.Millisecond)
	if err := s.CompleteOutbox(t.Context(), "a", "webhook", "tok", at); err != nil {
		t.Fatal(err)
	}
	if err := s.CompleteOutbox(t.Context(), "a", "webhook", "tok", at.Add(time.Second)); !errors.Is(err, llmflow.ErrLeaseLost) {
		t.Errorf("second complete: %v, want ErrLeaseLost", err)
	}
	if err := s.CompleteOutbox(t.Context(), "missing", "webhook", "tok", at); !errors.Is(err, llmflow.ErrLeaseLost) {
		t.Errorf("complete of an unknown message: %v, want ErrLeaseLost", err)
	}
	got := mustList(t, s, llmflow.OutboxFilter{ID: "a"})
	var web llmflow.OutboxMessage
	for _, m := range got {
		if m.Channel == "webhook" {
			web = m
		}
	}
	if !web.DeliveredAt.Equal(at) || web.LeaseToken != "" || !web.LeaseUntil.IsZero() {
		t.Errorf("delivered message %+v", web)
	}
	if und := mustList(t, s, llmflow.OutboxFilter{Undelivered: true}); !cmp.Equal(keys(und), []string{"a/email"}) {
		t.Errorf("undelivered %v", keys(und))
	}
	p, err := s.PendingOutbox(t.Context())
	if err != nil || !cmp.Equal(p, map[string]int64{"email": 1}) {
		t.Errorf("pending %v, %v", p, err)
	}
}

func testOutboxRetry(t *testing.T, s OutboxStore) {
	mustEnqueue(t, s, omsg("a", "webhook", obase))
	mustClaim(t, s, "tok", obase, time.Minute, 1)
	long := strings.Repeat("é", llmflow.MaxOutboxErrorBytes) + "\r\nX-Injected: 1"
	next := obase.Add(30 * time.Second)
	if err := s.RetryOutbox(t.Context(), "a", "webhook", "tok", next, long); err != nil {
		t.Fatal(err)
	}
	m := mustList(t, s, llmflow.OutboxFilter{ID: "a"})[0]
	if !m.NextAttemptAt.Equal(next) || m.LeaseToken != "" || !m.LeaseUntil.IsZero() || m.Attempts != 1 {
		t.Errorf("after retry %+v", m)
	}
	if len(m.LastError) > llmflow.MaxOutboxErrorBytes || !strings.HasPrefix(m.LastError, "éé") || strings.ContainsAny(m.LastError, "\r\n") {
		t.Errorf("last error not cut to %d bytes on a rune boundary without control characters: %d bytes", llmflow.MaxOutboxErrorBytes, len(m.LastError))
	}
	if err := s.RetryOutbox(t.Context(), "a", "webhook", "tok", next, "again"); !errors.Is(err, llmflow.ErrLeaseLost) {
		t.Errorf("retry after the lease was released: %v", err)
	}
	if got := mustClaim(t, s, "tok2", next.Add(-time.Microsecond), time.Minute, 1); got != nil {
		t.Errorf("claimed before its next attempt: %v", keys(got))
	}
	got := mustClaim(t, s, "tok2", next, time.Minute, 1)
	if len(got) != 1 || got[0].Attempts != 2 {
		t.Fatalf("claim at the next attempt: %+v", got)
	}
	if err := s.CompleteOutbox(t.Context(), "a", "webhook", "tok2", next); err != nil {
		t.Fatal(err)
	}
	if m := mustList(t, s, llmflow.OutboxFilter{ID: "a"})[0]; m.LastError != "" {
		t.Errorf("delivered message keeps its last error %q", m.LastError)
	}
}

func testOutboxReopen(t *testing.T, handle func() OutboxStore) {
	s := handle()
	mustEnqueue(t, s, omsg("a", "webhook", obase))
	mustClaim(t, s, "before-restart", obase, time.Minute, 1)
	r := handle() // a restarted gateway
	if in := mustEnqueue(t, r, omsg("a", "webhook", obase)); in != nil {
		t.Fatalf("enqueue after restart inserted %v", keys(in))
	}
	if got := mustClaim(t, r, "after-restart", obase.Add(time.Second), time.Minute, 1); got != nil {
		t.Fatalf("claimed a message leased before the restart: %v", keys(got))
	}
	got := mustClaim(t, r, "after-restart", obase.Add(time.Minute), time.Minute, 1)
	if len(got) != 1 {
		t.Fatalf("after the lease: %v", keys(got))
	}
	if err := r.CompleteOutbox(t.Context(), "a", "webhook", "after-restart", obase.Add(time.Minute)); err != nil {
		t.Fatal(err)
	}
	if m := mustList(t, s, llmflow.OutboxFilter{ID: "a"}); len(m) != 1 || !m[0].Delivered() {
		t.Errorf("first handle sees %+v", m)
	}
}

func testOutboxConcurrentEnqueue(t *testing.T, handle func() OutboxStore) {
	stores := []OutboxStore{handle(), handle()}
	const ids, workers = 20, 8
	var mu sync.Mutex
	inserted := map[string]int{}
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for w := range workers {
		wg.Go(func() {
			s := stores[w%len(stores)]
			for i := range ids {
				in, err := s.EnqueueOutbox(context.Background(), []llmflow.OutboxMessage{
					omsg(fmt.Sprintf("id%02d", i), "webhook", obase), omsg(fmt.Sprintf("id%02d", i), "email", obase)})
				if err != nil {
					errs <- err
					return
				}
				mu.Lock()
				for _, m := range in {
					inserted[m.ID+"/"+m.Channel]++
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if len(inserted) != 2*ids {
		t.Errorf("%d messages inserted, want %d", len(inserted), 2*ids)
	}
	for k, n := range inserted {
		if n != 1 {
			t.Errorf("%s inserted %d times", k, n)
		}
	}
	if got := mustList(t, stores[0], llmflow.OutboxFilter{}); len(got) != 2*ids {
		t.Errorf("%d rows stored, want %d", len(got), 2*ids)
	}
}

// testOutboxConcurrentClaims runs dispatchers on two handles at once:
// every message is claimed by exactly one of them and completed once.
func testOutboxConcurrentClaims(t *testing.T, handle func() OutboxStore) {
	stores := []OutboxStore{handle(), handle()}
	const n, workers = 60, 6
	var msgs []llmflow.OutboxMessage
	for i := range n {
		msgs = append(msgs, omsg(fmt.Sprintf("m%03d", i), []string{"webhook", "email"}[i%2], obase))
	}
	mustEnqueue(t, stores[0], msgs...)
	var mu sync.Mutex
	claimedBy := map[string][]string{}
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for w := range workers {
		wg.Go(func() {
			s := stores[w%len(stores)]
			for round := 0; ; round++ {
				tok := fmt.Sprintf("w%d-r%d", w, round)
				got, err := s.ClaimOutbox(context.Background(), llmflow.OutboxClaim{
					Channels: []string{"webhook", "email"}, Now: obase, LeaseUntil: obase.Add(time.Hour), Token: tok, Limit: 3})
				if err != nil {
					errs <- err
					return
				}
				if len(got) == 0 {
					return
				}
				for _, m := range got {
					mu.Lock()
					claimedBy[m.ID] = append(claimedBy[m.ID], tok)
					mu.Unlock()
					if err := s.CompleteOutbox(context.Background(), m.ID, m.Channel, tok, obase); err != nil {
						errs <- fmt.Errorf("complete %s by %s: %w", m.ID, tok, err)
						return
					}
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if len(claimedBy) != n {
		t.Errorf("%d messages claimed, want %d", len(claimedBy), n)
	}
	for id, toks := range claimedBy {
		if len(toks) != 1 {
			t.Errorf("%s claimed by %v", id, toks)
		}
	}
	if und := mustList(t, stores[1], llmflow.OutboxFilter{Undelivered: true}); und != nil {
		t.Errorf("left undelivered: %v", keys(und))
	}
}

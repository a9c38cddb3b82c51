package gateway

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/go-llmflow/llmflow/budgets"
	"github.com/go-llmflow/llmflow/internal/gatewaytest"
	"github.com/go-llmflow/llmflow/store"
)

// TestReplicasWithoutRedisSlice: two gateways on one store (the same
// SQLite file, opened by each as another process would) and no Redis see
// each other through their heartbeats in the store and each enforces half
// of every budget and key limit: a key with rpm = 30 gets 30 answers of
// 60 requests sent to both (before: 60), and a burst on a key budget of
// 0.01 GPU-hours spread over both spends at most that (before: about
// twice). When one stops beating, the other takes the whole again.
func TestReplicasWithoutRedisSlice(t *testing.T) {
	_, hs := simUpstream(t, time.Millisecond)
	path := filepath.Join(t.TempDir(), "llmflow.db")
	var envs []*testEnv
	for i := range 2 {
		db, err := store.OpenSQLite(context.Background(), path)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { db.Close() })
		e := newEnv(t, []string{hs.URL}, "", func(o *Options) {
			o.Keys, o.Records, o.Budgets = db, db, db
			// a beat of 1 s (3 s long): a loaded machine never lets one expire
			o.Replicas, o.Replica, o.ReplicaBeat = db, fmt.Sprintf("replica-%d", i), time.Second
		})
		e.db = db
		e.gw.Start(context.Background())
		envs = append(envs, e)
	}
	a, b := envs[0], envs[1]
	waitUntil(t, func() bool { return a.gw.bud.mem.Slice() == 2 && b.gw.bud.mem.Slice() == 2 })

	_, secret, err := a.gw.CreateKey(t.Context(), KeyRequest{Team: "lab-nlp", Name: "sliced", RPM: 30}, Principal{})
	if err != nil {
		t.Fatal(err)
	}
	ok := 0
	for i := range 60 {
		resp := gatewaytest.Post(t, envs[i%2].srv, secret, "/v1/chat/completions", `{"model":"m","messages":[{"role":"user","content":"hi"}],"max_tokens":2}`)
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		switch resp.StatusCode {
		case http.StatusOK:
			ok++
		case http.StatusTooManyRequests:
		default:
			t.Fatalf("request %d: %d", i, resp.StatusCode)
		}
	}
	t.Logf("rpm=30 over two replicas: %d answered of 60", ok)
	if ok > 30 || ok < 28 {
		t.Fatalf("%d answered of 60 with rpm = 30 over two replicas", ok)
	}

	// a key budget: both put it in force
	k2, secret2, err := a.gw.CreateKey(t.Context(), KeyRequest{Team: "lab-nlp", Name: "budget"}, Principal{})
	if err != nil {
		t.Fatal(err)
	}
	const limit = 0.01
	bu := budgets.Budget{Scope: budgets.Scope{Kind: budgets.KindKey, Name: k2.ID}, Period: budgets.Day, MaxCost: limit,
		Source: budgets.SourceAdmin, UpdatedAt: time.Now().UTC()}
	if err := a.db.PutBudget(t.Context(), bu); err != nil {
		t.Fatal(err)
	}
	for _, e := range envs {
		if err := e.gw.RefreshBudgets(t.Context()); err != nil {
			t.Fatal(err)
		}
	}
	var mu sync.Mutex
	var runs [2]shapeRun
	var wg sync.WaitGroup
	for i, e := range envs {
		wg.Go(func() {
			r := burst(t, e, secret2, "/v1/chat/completions", `{"model":"m","messages":[{"role":"user","content":"Tell me a story."}],"max_tokens":100}`, 20)
			mu.Lock()
			runs[i] = r
			mu.Unlock()
		})
	}
	wg.Wait()
	completion := runs[0].completion + runs[1].completion
	engine := float64(completion) * 10 / 1e6
	t.Logf("key budget %v over two replicas: served %d+%d, the engine's output alone %.5f (%.1f %%)",
		limit, runs[0].served, runs[1].served, engine, 100*engine/limit)
	if engine > limit || runs[0].served == 0 || runs[1].served == 0 {
		t.Fatalf("served %d and %d; engine output %v of a budget of %v", runs[0].served, runs[1].served, engine, limit)
	}

	// b stops beating (its process is gone): a takes the whole again
	b.gw.Close(context.Background())
	waitUntil(t, func() bool { return a.gw.bud.mem.Slice() == 1 })
}

package main

import (
	"context"
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// TestKeyRPMAcrossReplicas: two replicas sharing one Redis, a key with a
// limit of 4 requests per minute, requests alternating between them: 4
// are answered in all, not 4 by each, and the refusals are 429 with a
// Retry-After.
func TestKeyRPMAcrossReplicas(t *testing.T) {
	rds := startRedis(t, freeAddr(t))
	sim := startSim(t, time.Millisecond)
	dir := t.TempDir()
	reps := startReplicas(t, replicasConfig(t, dir, sim, redisAt(rds.addr), `pool "sim" { capacity = 64 }`), dir, 2)
	status, key := procAdmin(t, http.MethodPost, reps[0].base+"/admin/keys", `{"team":"lab-nlp","name":"rpm","rpm":4}`)
	if key == "" {
		t.Fatalf("create key: %d", status)
	}
	var ok, limited int
	for i := range 8 {
		req, _ := http.NewRequest(http.MethodPost, reps[i%2].base+"/v1/chat/completions",
			strings.NewReader(`{"model":"sim-llama","max_tokens":2,"messages":[{"role":"user","content":"hi"}]}`))
		req.Header.Set("Authorization", "Bearer "+key)
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		switch resp.StatusCode {
		case 200:
			ok++
		case http.StatusTooManyRequests:
			limited++
			if resp.Header.Get("Retry-After") == "" {
				t.Errorf("429 without Retry-After")
			}
		default:
			t.Fatalf("request %d: %d", i, resp.StatusCode)
		}
	}
	if ok != 4 || limited != 4 {
		t.Fatalf("answered %d, refused %d over two replicas; want 4 and 4 (4 per minute for the key, shared)", ok, limited)
	}
	for i, r := range reps {
		if h := healthz(t, r.base); h.Shared == nil || h.Shared.Status != "ok" {
			t.Fatalf("replica %d health: %+v", i, h.Shared)
		}
	}
}

// TestOneRedisRoundTripPerSide: a serve process whose requests go through
// every shared check (a key with RPM, TPM and in-flight limits, an
// organisation budget, the fair-share counters) runs at most one Redis
// script at a request's admission and one at its end, counted by Redis
// itself (INFO commandstats), plus the leases' beats (one a second per
// pool, one for the ledger); apart, the ledger's and the counters'
// scripts were four. Ends and counts of requests admitted from quotas
// share scripts (settled in batches), so there may be fewer; that the
// checks ran in Redis shows in Redis: the organisation's budget there is
// charged for the requests.
func TestOneRedisRoundTripPerSide(t *testing.T) {
	rds := startRedis(t, freeAddr(t))
	sim := startSim(t, time.Millisecond)
	dir := t.TempDir()
	rep := startReplicas(t, replicasConfig(t, dir, sim, redisAt(rds.addr), `pool "sim" { capacity = 64 }`), dir, 1)[0]
	status, key := procAdmin(t, http.MethodPost, rep.base+"/admin/keys", `{"team":"lab-nlp","name":"limited","rpm":100000,"tpm":100000000,"max_inflight":50}`)
	if key == "" {
		t.Fatalf("create key: %d", status)
	}
	if status, _ := procAdmin(t, http.MethodPut, rep.base+"/admin/budgets", `{"kind":"org","name":"etabA","period":"month","max_cost":1000}`); status != http.StatusOK {
		t.Fatalf("set budget: %d", status)
	}
	rdb := redis.NewClient(&redis.Options{Addr: rds.addr})
	t.Cleanup(func() { rdb.Close() })
	scripts := func() int64 {
		info, err := rdb.Info(context.Background(), "commandstats").Result()
		if err != nil {
			t.Fatal(err)
		}
		var n int64
		for line := range strings.SplitSeq(info, "\n") {
			for _, cmd := range []string{"cmdstat_evalsha:calls=", "cmdstat_eval:calls="} {
				if rest, ok := strings.CutPrefix(strings.TrimSpace(line), cmd); ok {
					v, _ := strconv.ParseInt(rest[:strings.IndexByte(rest, ',')], 10, 64)
					n += v
				}
			}
		}
		return n
	}
	// what Redis has charged the organisation's budget (the ledger's
	// hash of its period)
	charged := func() int64 {
		keys, err := rdb.Keys(context.Background(), "*ledger:b:org/etabA/*").Result()
		if err != nil || len(keys) != 1 {
			t.Fatalf("the organisation's budget in Redis: %v %v", keys, err)
		}
		v, _ := rdb.HGet(context.Background(), keys[0], "charged").Int64()
		return v
	}
	c := &http.Client{}
	shortRequest(c, rep.base, key) // loads the scripts; budgets in force
	// what one request is charged (they are all alike), once its end
	// reached Redis
	perRequest := int64(0)
	for deadline := time.Now().Add(5 * time.Second); perRequest == 0 && time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		perRequest = charged()
	}
	if perRequest == 0 {
		t.Fatal("the first request's end never charged the budget in Redis")
	}
	const n = 40
	start, before, chargedBefore := time.Now(), scripts(), perRequest
	for i := range n {
		if !shortRequest(c, rep.base, key) {
			t.Fatalf("request %d failed", i)
		}
	}
	secs := time.Since(start).Seconds()
	// A request's end is handed to the replica's pipe and not waited for
	// when its quotas covered it: the last ones may still be on their way
	// when the answer is read.
	for deadline := time.Now().Add(5 * time.Second); charged()-chargedBefore < n*perRequest && time.Now().Before(deadline); {
		time.Sleep(5 * time.Millisecond)
	}
	calls := scripts() - before
	beats := 2 * (int64(secs) + 2) // a beat a second: one pool's lease and the ledger's
	t.Logf("%d requests in %.2f s: %d Redis scripts", n, secs, calls)
	if calls > 2*n+beats {
		t.Fatalf("%d requests ran %d Redis scripts in %.1f s: more than one round trip at admission and one at the end (%d, plus at most %d beats)",
			n, calls, secs, 2*n, beats)
	}
	if got := charged() - chargedBefore; got != n*perRequest {
		t.Fatalf("Redis charged the budget %d for %d requests of %d each: the shared checks did not run in Redis", got, n, perRequest)
	}
	if h := healthz(t, rep.base); h.Shared == nil || h.Shared.Status != "ok" {
		t.Fatalf("health: %+v", h.Shared)
	}
}

// TestKeyChangesReachAllReplicas: with a redis block, a key deactivated
// through one replica (PUT /admin/keys/{id}/active) is refused by the
// other at once, although that one had the key cached, and reactivated
// the same way; new limits (PUT /admin/keys/{id}/limits) hold there too.
func TestKeyChangesReachAllReplicas(t *testing.T) {
	rds := startRedis(t, freeAddr(t))
	sim := startSim(t, time.Millisecond)
	dir := t.TempDir()
	reps := startReplicas(t, replicasConfig(t, dir, sim, redisAt(rds.addr), `pool "sim" { capacity = 64 }`), dir, 2)
	a, b := reps[0], reps[1]
	key := createKey(t, a.base)
	c := &http.Client{}
	if !shortRequest(c, b.base, key) { // b caches the key
		t.Fatal("first request on b failed")
	}
	var id string
	{
		req, _ := http.NewRequest(http.MethodGet, a.base+"/admin/keys?team=lab-nlp", nil)
		req.Header.Set("Authorization", "Bearer "+procMasterKey)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		var out struct {
			Data []struct{ ID string } `json:"data"`
		}
		json.NewDecoder(resp.Body).Decode(&out)
		resp.Body.Close()
		if len(out.Data) != 1 {
			t.Fatalf("keys: %+v", out)
		}
		id = out.Data[0].ID
	}
	status := func(base string) int {
		req, _ := http.NewRequest(http.MethodPost, base+"/v1/chat/completions",
			strings.NewReader(`{"model":"sim-llama","max_tokens":2,"messages":[{"role":"user","content":"hi"}]}`))
		req.Header.Set("Authorization", "Bearer "+key)
		resp, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if s, _ := procAdmin(t, http.MethodPut, a.base+"/admin/keys/"+id+"/active", `{"active":false}`); s != http.StatusOK {
		t.Fatalf("deactivate: %d", s)
	}
	start := time.Now()
	for status(b.base) != http.StatusForbidden {
		if time.Since(start) > time.Second {
			t.Fatal("a key deactivated on a was still served by b after 1 s")
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Logf("deactivation reached b in %s", time.Since(start).Round(time.Millisecond))
	if s, _ := procAdmin(t, http.MethodPut, a.base+"/admin/keys/"+id+"/active", `{"active":true}`); s != http.StatusOK {
		t.Fatalf("reactivate: %d", s)
	}
	waitUntil(t, time.Second, func() bool { return status(b.base) == http.StatusOK })
	// limits: 1 request a minute, shared; b sees it at once
	if s, _ := procAdmin(t, http.MethodPut, a.base+"/admin/keys/"+id+"/limits", `{"rpm":1}`); s != http.StatusOK {
		t.Fatalf("limits: %d", s)
	}
	time.Sleep(100 * time.Millisecond)
	if s1, s2 := status(b.base), status(b.base); s1 != http.StatusOK || s2 != http.StatusTooManyRequests {
		t.Fatalf("under rpm 1 on b: %d then %d, want 200 then 429", s1, s2)
	}
}

// TestRidingSurvivesRedisRestart: two replicas whose requests all go
// through the shared ledger (a key with limits, an organisation budget)
// and the counters; Redis is killed under load and comes back empty.
// No request fails: during the outage each replica falls back to its own
// slice, and says so; when Redis answers, both rebuild, and once the load
// ends nothing is left in flight or held, in Redis or in the replicas.
func TestRidingSurvivesRedisRestart(t *testing.T) {
	if testing.Short() {
		t.Skip("kills and restarts a redis-server under load")
	}
	rds := startRedis(t, freeAddr(t))
	sim := startSim(t, 5*time.Millisecond)
	dir := t.TempDir()
	reps := startReplicas(t, replicasConfig(t, dir, sim, redisAt(rds.addr), `pool "sim" { capacity = 64 }`), dir, 2)
	status, key := procAdmin(t, http.MethodPost, reps[0].base+"/admin/keys", `{"team":"lab-nlp","name":"limited","rpm":1000000,"tpm":100000000,"max_inflight":1000}`)
	if key == "" {
		t.Fatalf("create key: %d", status)
	}
	if s, _ := procAdmin(t, http.MethodPut, reps[0].base+"/admin/budgets", `{"kind":"org","name":"etabA","period":"month","max_cost":1000}`); s != http.StatusOK {
		t.Fatalf("set budget: %d", s)
	}
	c := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 16}, Timeout: 30 * time.Second}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var ok, failed atomic.Int64
	for w := range 8 {
		wg.Go(func() {
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				if shortRequest(c, reps[(w+i)%2].base, key) {
					ok.Add(1)
				} else {
					failed.Add(1)
				}
			}
		})
	}
	// each phase waits for requests answered in it, not for a time: a
	// loaded 2-core machine is slow, not wrong
	answered := func(what string, n int64) {
		from := ok.Load()
		waitFor(t, 30*time.Second, what, func() bool { return ok.Load() >= from+n })
	}
	answered("requests answered on Redis", 20)
	rds.kill()
	waitFor(t, 10*time.Second, "both replicas in fallback", func() bool {
		for _, r := range reps {
			if h := healthz(t, r.base); h.Shared == nil || h.Shared.Status != "fallback" {
				return false
			}
		}
		return true
	})
	answered("requests answered in the fallback", 20)
	startRedis(t, rds.addr) // empty: no persistence
	waitFor(t, 15*time.Second, "both replicas back on Redis", func() bool {
		for _, r := range reps {
			if h := healthz(t, r.base); h.Shared == nil || h.Shared.Status != "ok" {
				return false
			}
		}
		return true
	})
	answered("requests answered on the restarted Redis", 20)
	close(stop)
	wg.Wait()
	t.Logf("%d answered, %d failed", ok.Load(), failed.Load())
	if failed.Load() != 0 || ok.Load() == 0 {
		t.Fatalf("%d requests failed (%d answered) across a Redis restart", failed.Load(), ok.Load())
	}
	// A client has its answer a moment before its replica releases the
	// request: wait (with a deadline) for the releases, not a fixed time.
	waitFor(t, 10*time.Second, "nothing in flight in the replicas", func() bool {
		for _, r := range reps {
			if poolInFlight(t, r.base) != 0 {
				return false
			}
		}
		return true
	})
	rdb := redis.NewClient(&redis.Options{Addr: rds.addr})
	t.Cleanup(func() { rdb.Close() })
	keys, _ := rdb.Keys(context.Background(), "llmflow:ledger:*").Result()
	if len(keys) == 0 {
		t.Fatal("no ledger keys in Redis after it came back: the requests did not go through the shared ledger")
	}
	left := func() (what string) {
		for _, k := range keys {
			if strings.HasSuffix(k, ":live") { // the ledger's leases
				continue
			}
			h, _ := rdb.HGetAll(context.Background(), k).Result()
			for f, v := range h {
				if (strings.HasPrefix(f, "h:") || strings.HasPrefix(f, "i:")) && v != "0" {
					return k + " " + f + " = " + v
				}
			}
		}
		return ""
	}
	waitFor(t, 10*time.Second, "no hold or in-flight count left in Redis", func() bool { return left() == "" })
}

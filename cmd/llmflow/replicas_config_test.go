package main

import (
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/go-llmflow/llmflow/vllmsim"
)

// TestReplicasConfiguredBeforeRedis: a replica started while its Redis
// is down, with redis { replicas = 3 }, has seen no other replica yet: it
// takes a third of each reservation, not the whole. etabA's reservation
// is 12 (capacity 16, share 0.75): of 6 streams, 4 are within share and
// 2 borrow; /healthz says fallback over 3 replicas.
func TestReplicasConfiguredBeforeRedis(t *testing.T) {
	sim := vllmsim.New(vllmsim.Config{APIKey: "sim-secret", StepInterval: 20 * time.Millisecond,
		Sched: vllmsim.SchedConfig{MaxNumSeqs: 256, KVBlocks: 1 << 16}})
	simSrv := httptest.NewServer(sim)
	t.Cleanup(func() { simSrv.Close(); sim.Close() })
	dir := t.TempDir()
	p := startServe(t, replicasConfig(t, dir, simSrv.URL, redisAt(freeAddr(t))+"  replicas = 3\n", "pool \"sim\" {\n  capacity = 16\n  reclaim  = \"none\"\n}"))
	key := createKey(t, p.base)
	c := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 16}}
	for range 6 {
		s := holdStream(t, c, p.base, key)
		t.Cleanup(func() { s.body.Close() })
	}
	var within, borrowing int
	for range 500 {
		within, borrowing = 0, 0
		for _, r := range sim.Received() {
			switch {
			case !r.Stream:
			case r.Priority <= 1:
				within++
			case r.Priority >= 10:
				borrowing++
			}
		}
		if within+borrowing >= 6 {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	if within != 4 || borrowing != 2 {
		t.Errorf("6 streams of etabA with Redis down from the start, replicas = 3: %d within, %d borrowing; want 4 and 2 (12 / 3)", within, borrowing)
	}
	if h := healthz(t, p.base); h.Shared == nil || h.Shared.Status != "fallback" || h.Shared.Replicas != 3 {
		t.Errorf("/healthz: %+v %+v", h, h.Shared)
	}
	// The ledger too: a key's RPM of 9 is 3 on this replica.
	status, key9 := procAdmin(t, http.MethodPost, p.base+"/admin/keys", `{"team":"lab-chem","name":"k","rpm":9}`)
	if status != http.StatusCreated || key9 == "" {
		t.Fatalf("create key: %d", status)
	}
	ok := 0
	for range 6 {
		if shortRequest(c, p.base, key9) {
			ok++
		}
	}
	if ok != 3 {
		t.Errorf("%d of 6 requests of a key with rpm = 9 answered with Redis down, replicas = 3; want 3", ok)
	}
}

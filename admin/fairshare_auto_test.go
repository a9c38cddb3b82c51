package admin

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/go-llmflow/llmflow/gateway"
)

// GET /admin/fairshare shows the capacity loop of an auto pool, and
// nothing more for a fixed one.
func TestFairshareOfAuto(t *testing.T) {
	out := fairshareOf(gateway.FairshareReport{Pools: []gateway.PoolShare{
		{Pool: "a", Capacity: 36, Auto: &gateway.CapacityAuto{Min: 4, Max: 40, Leader: true, Decision: "steady"}},
		{Pool: "f", Capacity: 16},
	}})
	b, err := json.Marshal(out)
	if err != nil {
		t.Fatal(err)
	}
	s := string(b)
	if want := `"capacity":36,`; !strings.Contains(s, want) {
		t.Errorf("%s: no %s", s, want)
	}
	if want := `"capacity_auto":{"min":4,"max":40,"leader":true,"decision":"steady"}`; !strings.Contains(s, want) {
		t.Errorf("%s: no %s", s, want)
	}
	if strings.Count(s, "capacity_auto") != 1 {
		t.Errorf("%s: capacity_auto on the fixed pool", s)
	}
}

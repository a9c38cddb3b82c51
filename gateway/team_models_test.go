package gateway

import (
	"testing"

	"github.com/go-llmflow/llmflow"
	"github.com/go-llmflow/llmflow/engine"
)

// modelExchange is a request of team for model, as admitModel sees it.
func modelExchange(team, model string) *exchange {
	return &exchange{key: &llmflow.Key{Team: team}, rq: &clientRequest{model: model}, ep: engine.ChatCompletions}
}

// TestAdmitModelAllocFree: the team model list check on the request path
// allocates nothing, with lists or without.
func TestAdmitModelAllocFree(t *testing.T) {
	e := newEnv(t, []string{"http://127.0.0.1:1"}, "")
	x := modelExchange("lab-nlp", "m")
	check := func(what string) {
		t.Helper()
		if n := testing.AllocsPerRun(1000, func() {
			if err := e.gw.admitModel(t.Context(), x); err != nil {
				t.Fatal(err)
			}
		}); n != 0 {
			t.Errorf("%s: %v allocations per admission", what, n)
		}
	}
	check("no list")
	e.gw.SetTeamModels(map[string][]string{"lab-chem": {"batchm"}})
	check("a list for another team")
	e.gw.SetTeamModels(map[string][]string{"lab-chem": {"batchm"}, "lab-nlp": {"m", "batchm"}})
	check("a list for the team")
}

// BenchmarkAdmitModel is the model step of admission with and without a
// team model list.
//
//	go test -run '^$' -bench AdmitModel -benchmem ./gateway
func BenchmarkAdmitModel(b *testing.B) {
	e := newEnv(b, []string{"http://127.0.0.1:1"}, "")
	x := modelExchange("lab-nlp", "m")
	run := func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if err := e.gw.admitModel(b.Context(), x); err != nil {
				b.Fatal(err)
			}
		}
	}
	b.Run("no-list", run)
	e.gw.SetTeamModels(map[string][]string{"lab-nlp": {"m", "batchm"}})
	b.Run("list", run)
}

package gateway

import (
	"strings"
	"testing"
)

// TestBudgetMetrics: each budget in force is a series of its spent and
// limit GPU-hours; no budget, no series.
func TestBudgetMetrics(t *testing.T) {
	e, _ := budgetEnv(t, []string{"http://127.0.0.1:1"}, "")
	if text := e.metricsText(t); strings.Contains(text, "llmflow_budget_spent_gpu_hours{") {
		t.Errorf("a budget series without budgets:\n%s", text)
	}
	putBudget(t, e, `{"kind":"team","name":"lab-nlp","period":"month","max_cost":500}`)
	text := e.metricsText(t)
	for _, want := range []string{
		`llmflow_budget_spent_gpu_hours{kind="team",model="",name="lab-nlp",period="month"} 0`,
		`llmflow_budget_limit_gpu_hours{kind="team",model="",name="lab-nlp",period="month"} 500`,
	} {
		if !strings.Contains(text, want) {
			t.Errorf("metrics lack %s", want)
		}
	}
}

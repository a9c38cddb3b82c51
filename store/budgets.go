package store

import (
	"time"

	"github.com/go-llmflow/llmflow/budgets"
)

// budgetColumns are the columns of budgets in the order scanBudget reads
// them.
const budgetColumns = `kind, name, model, period, max_cost, soft_limit, updated_at`

// increaseColumns likewise for budget_increases.
const increaseColumns = `id, kind, name, model, amount, expires_at, created_at`

// spendColumn is the rollup column a budget of kind k selects on.
var spendColumn = map[budgets.Kind]string{
	budgets.KindOrg:     "org",
	budgets.KindTeam:    "team",
	budgets.KindProject: "project",
	budgets.KindKey:     "key_id",
	budgets.KindTag:     "tag",
}

// budgetSpendQuery is the BudgetSpend query of every backend, in d's SQL:
// the GPU-hours of each hour from from on, of the scope's rollups (per tag
// for a tag budget, so a request counts once under each of its tags).
func (d dialect) budgetSpendQuery(sc budgets.Scope, from time.Time) (string, []any) {
	table := "rollups"
	if sc.Kind == budgets.KindTag {
		table = "rollups_by_tag"
	}
	args := []any{d.hour(from), sc.Name}
	q := `SELECT hour, sum(gpu_hours) FROM ` + table + ` WHERE hour >= ` + d.placeholder(1) +
		` AND ` + spendColumn[sc.Kind] + ` = ` + d.placeholder(2)
	if sc.Model != "" {
		args = append(args, sc.Model)
		q += ` AND model = ` + d.placeholder(3)
	}
	return q + ` GROUP BY hour`, args
}

// addSpend adds the GPU-hours of one stored hour to st: to its hour when
// the hour is at or after recent, to Older otherwise.
func addSpend(st *budgets.StoredSpend, hour time.Time, gh float64, recent time.Time) {
	if hour.Before(recent) {
		st.Older += gh
		return
	}
	st.Hours[hour.UTC()] += gh
}

func badScope(sc budgets.Scope) error {
	if err := sc.Validate(); err != nil {
		return validationError(err)
	}
	return nil
}

package store_test

import (
	"testing"

	"github.com/go-llmflow/llmflow/store/storetest"
)

func TestPostgres_Budgets(t *testing.T) {
	pgDSN(t)
	storetest.RunBudgets(t, func(t *testing.T) storetest.BudgetStore {
		return MustOpenPostgres(t, pgSchema(t))
	})
}

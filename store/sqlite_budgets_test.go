package store_test

import (
	"path/filepath"
	"testing"

	"github.com/go-llmflow/llmflow/store"
	"github.com/go-llmflow/llmflow/store/storetest"
)

func TestSQLite_Budgets(t *testing.T) {
	storetest.RunBudgets(t, func(t *testing.T) storetest.BudgetStore {
		s, err := store.OpenSQLite(t.Context(), filepath.Join(t.TempDir(), "llmflow.db"))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		return s
	})
}

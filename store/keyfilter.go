package store

import (
	"strings"

	"github.com/go-llmflow/llmflow"
)

// listKeysQuery is the ListKeys query of every store: placeholder(n)
// writes the n-th parameter (1-based) in the dialect's syntax.
func listKeysQuery(f llmflow.KeyFilter, placeholder func(n int) string) (string, []any) {
	var where []string
	var args []any
	eq := func(col, v string) {
		if v != "" {
			args = append(args, v)
			where = append(where, col+" = "+placeholder(len(args)))
		}
	}
	eq("org", f.Org)
	eq("team", f.Team)
	if !f.IncludeRevoked {
		where = append(where, "revoked_at IS NULL")
	}
	q := `SELECT ` + keyColumns + ` FROM keys`
	if len(where) > 0 {
		q += ` WHERE ` + strings.Join(where, " AND ")
	}
	return q + ` ORDER BY created_at, id`, args
}

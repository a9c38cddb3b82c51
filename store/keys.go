package store

import (
	"strings"

	"github.com/go-llmflow/llmflow"
)

// keyColumns are the columns of keys in the order scanKey and pgScanKey
// read them.
const keyColumns = `id, hash, hint, name, org, team, project, owner, rpm, tpm, max_inflight, tags, created_at, revoked_at, disabled`

// listKeysQuery is the ListKeys query of every backend, in d's SQL.
func (d dialect) listKeysQuery(f llmflow.KeyFilter) (string, []any) {
	var where []string
	var args []any
	eq := func(col, v string) {
		if v != "" {
			args = append(args, v)
			where = append(where, col+" = "+d.placeholder(len(args)))
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

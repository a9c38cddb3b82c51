package admin

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"net/http"
	"net/url"
	"os"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/go-llmflow/llmflow/store"
)

// pgAdminStore opens a PostgreSQL store in a schema of its own (dropped at
// the end) on LLMFLOW_TEST_PG_DSN; LLMFLOW_SKIP_PG=1 skips, as in the
// store's tests.
func pgAdminStore(t *testing.T) *store.Postgres {
	t.Helper()
	dsn := os.Getenv("LLMFLOW_TEST_PG_DSN")
	if dsn == "" {
		if os.Getenv("LLMFLOW_SKIP_PG") == "1" {
			t.Skip("LLMFLOW_SKIP_PG=1: PostgreSQL tests skipped")
		}
		t.Fatal("LLMFLOW_TEST_PG_DSN is not set (e.g. postgres://postgres@127.0.0.1:5432/test?sslmode=disable), or set LLMFLOW_SKIP_PG=1")
	}
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatalf("connect to LLMFLOW_TEST_PG_DSN: %v", err)
	}
	defer conn.Close(ctx)
	b := make([]byte, 6)
	rand.Read(b)
	schema := "llmflow_test_" + hex.EncodeToString(b)
	if _, err := conn.Exec(ctx, "CREATE SCHEMA "+schema); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if c, err := pgx.Connect(ctx, dsn); err == nil {
			c.Exec(ctx, "DROP SCHEMA "+schema+" CASCADE")
			c.Close(ctx)
		}
	})
	u, err := url.Parse(dsn)
	if err != nil {
		t.Fatal("LLMFLOW_TEST_PG_DSN is not a URL")
	}
	q := u.Query()
	q.Set("search_path", schema)
	u.RawQuery = q.Encode()
	s, err := store.OpenPostgres(ctx, u.String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// TestAdminAcrossGatewaysPostgres: two gateways on one PostgreSQL store,
// as in production. A user, role and token made on one work on the other;
// a role removed and a token revoked on one stop on the other at its next
// request, though it had the principal cached.
func TestAdminAcrossGatewaysPostgres(t *testing.T) {
	db := pgAdminStore(t)
	withDB := func(o *envOptions) { o.Keys, o.Admin = db, db }
	a := newEnv(t, []string{"http://127.0.0.1:1"}, "", withDB)
	b := newEnv(t, []string{"http://127.0.0.1:1"}, "", withDB)
	must := func(e *testEnv, method, path, tok, body string, want int) string {
		t.Helper()
		code, out := e.do(t, method, path, tok, body)
		if code != want {
			t.Fatalf("%s %s: %d %s, want %d", method, path, code, out, want)
		}
		return out
	}
	must(a, "POST", "/admin/users", a.master, `{"name":"alice"}`, 201)
	must(a, "PUT", "/admin/users/alice/roles", a.master, `{"role":"team_admin","team":"lab-nlp"}`, 200)
	var tok tokenView
	json.Unmarshal([]byte(must(a, "POST", "/admin/users/alice/tokens", a.master, `{}`, 201)), &tok)

	must(b, "POST", "/admin/teams/lab-nlp/projects", tok.Token, `{"name":"p1"}`, 201)
	must(b, "PUT", "/admin/teams/lab-nlp/models", tok.Token, `{"models":["m"]}`, 200)
	// a learns of b's changes at its next reload (every 5 s while serving)
	if _, err := a.adm.reloadAdmin(t.Context(), 0); err != nil {
		t.Fatal(err)
	}
	if out := must(a, "GET", "/admin/teams/lab-nlp/projects", a.master, "", 200); !strings.Contains(out, `"p1"`) {
		t.Errorf("a's projects after reload: %s", out)
	}
	if code, _ := a.do(t, "POST", "/v1/chat/completions", a.key, `{"model":"batchm","messages":[]}`); code != http.StatusNotFound {
		t.Errorf("a hides batchm after reload: %d, want 404", code)
	}
	must(b, "GET", "/admin/whoami", tok.Token, "", 200)
	must(a, "DELETE", "/admin/users/alice/roles?role=team_admin&team=lab-nlp", a.master, "", 200)
	must(b, "POST", "/admin/teams/lab-nlp/projects", tok.Token, `{"name":"p2"}`, http.StatusForbidden)
	must(a, "DELETE", "/admin/users/alice/tokens/"+tok.ID, a.master, "", 200)
	must(b, "GET", "/admin/whoami", tok.Token, "", http.StatusUnauthorized)
	// the project made through b is in the store: a restart of a serves it
	c := newEnv(t, []string{"http://127.0.0.1:1"}, "", withDB)
	if out := must(c, "GET", "/admin/teams/lab-nlp/projects", c.master, "", 200); !strings.Contains(out, `"p1"`) {
		t.Errorf("projects after restart: %s", out)
	}
}

package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/go-llmflow/llmflow"
	"github.com/go-llmflow/llmflow/budgets"
)

// TestStoreUnavailableIs503: a SQLite file another process holds locked
// longer than the caller waits makes the store's write an
// EUNAVAILABLE error (503 where it is answered), not an internal one
// (500, before); so do PostgreSQL's connection failures, and nothing
// else.
func TestStoreUnavailableIs503(t *testing.T) {
	path := filepath.Join(t.TempDir(), "llmflow.db")
	s, err := OpenSQLite(context.Background(), path)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	other, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	conn, err := other.Conn(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := conn.ExecContext(context.Background(), "BEGIN IMMEDIATE"); err != nil {
		t.Fatal(err)
	}
	defer conn.ExecContext(context.Background(), "ROLLBACK")
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	b := budgets.Budget{Scope: budgets.Scope{Kind: budgets.KindTeam, Name: "t"}, Period: budgets.Day, MaxCost: 1, UpdatedAt: time.Now()}
	err = s.PutBudget(ctx, b)
	if err == nil || llmflow.ErrorCode(err) != llmflow.EUNAVAILABLE {
		t.Fatalf("write to a locked store: %v (code %q), want %s", err, llmflow.ErrorCode(err), llmflow.EUNAVAILABLE)
	}

	for _, tc := range []struct {
		err  error
		want bool
	}{
		{&pgconn.PgError{Code: "57P01"}, true}, // admin shutdown
		{&pgconn.PgError{Code: "08006"}, true}, // connection failure
		{&pgconn.PgError{Code: "53300"}, true}, // too many connections
		{fmt.Errorf("x: %w", context.DeadlineExceeded), true},
		{&pgconn.PgError{Code: "23505"}, false}, // unique violation
		{errors.New("boom"), false},
		{context.Canceled, false},
	} {
		got := llmflow.ErrorCode(pgUnavailable(tc.err)) == llmflow.EUNAVAILABLE
		if got != tc.want {
			t.Errorf("%v: unavailable %v, want %v", tc.err, got, tc.want)
		}
		if !errors.Is(pgUnavailable(tc.err), tc.err) {
			t.Errorf("%v: not found in its wrapper", tc.err)
		}
	}
}

package slurm_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/go-sql-driver/mysql"

	"github.com/go-llmflow/llmflow/slurm"
)

// Neither the DSN nor its password ever shows in an error, whether the DSN
// does not parse, names no database, or fails when connecting.
func TestOpen_NeverShowsTheDSN(t *testing.T) {
	const pw = "s3cr3t-Pw"
	for _, c := range []struct {
		name, dsn string
		openErr   string // "" : Open succeeds, the query fails
	}{
		{"Unreachable", "llmflow:" + pw + "@tcp(127.0.0.1:1)/slurm_acct_db", ""},
		{"BadEscape", "llmflow:" + pw + "@tcp(127.0.0.1:3306)/slurm_acct_db?x=%zz", "invalid DSN (not shown)"},
		{"NoDatabase", "llmflow:" + pw + "@tcp(127.0.0.1:3306)", "invalid DSN (not shown)"},
		{"EmptyDatabase", "llmflow:" + pw + "@tcp(127.0.0.1:3306)/", "names no database"},
		{"UnknownNetwork", "llmflow:" + pw + "@bogus(127.0.0.1)/slurm_acct_db", ""},
		{"PasswordInOption", "llmflow:" + pw + "@tcp(127.0.0.1:3306)/slurm_acct_db?timeout=" + pw, "invalid DSN (not shown)"},
		{"Unparsable", "llmflow:" + pw + "@tcp(127.0.0.1:3306", "invalid DSN (not shown)"},
	} {
		t.Run(c.name, func(t *testing.T) {
			db, err := slurm.Open(c.dsn)
			if c.openErr != "" {
				if err == nil || !strings.Contains(err.Error(), c.openErr) {
					t.Fatalf("Open: error %v, want %q", err, c.openErr)
				}
			} else {
				if err != nil {
					t.Fatalf("Open: %v", err)
				}
				defer db.Close()
				_, err = db.Associations(context.Background(), "hgx")
				if err == nil {
					t.Fatal("no error")
				}
			}
			if strings.Contains(err.Error(), pw) || strings.Contains(err.Error(), c.dsn) {
				t.Errorf("error shows the password: %v", err)
			}
		})
	}
}

func TestDB_Redact(t *testing.T) {
	dsn := "llmflow:pw-12345@tcp(127.0.0.1:1)/slurm_acct_db"
	db, err := slurm.Open(dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if got := db.Redact("dial " + dsn + " with pw-12345, then tcp"); got != "dial [redacted] with [redacted], then tcp" {
		t.Errorf("Redact = %q", got)
	}
}

func TestDB_AssociationsInvalidCluster(t *testing.T) {
	db, err := slurm.Open("u:p@tcp(127.0.0.1:1)/db")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	for _, c := range []string{"", "hgx`; DROP TABLE acct_table; --", "a b", "x/y", strings.Repeat("a", 70)} {
		if _, err := db.Associations(context.Background(), c); err == nil || !strings.Contains(err.Error(), "invalid cluster name") {
			t.Errorf("cluster %q: error %v", c, err)
		}
	}
}

func TestRetryable(t *testing.T) {
	for _, c := range []struct {
		name string
		err  error
		want bool
	}{
		{"Deadlock", &mysql.MySQLError{Number: 1213, Message: "Deadlock found"}, true},
		{"LockWaitTimeout", fmt.Errorf("write-back: %w", &mysql.MySQLError{Number: 1205}), true},
		{"OtherMySQL", &mysql.MySQLError{Number: 1146}, false},
		{"Other", errors.New("deadlock"), false},
		{"Nil", nil, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			if got := slurm.Retryable(c.err); got != c.want {
				t.Errorf("Retryable(%v) = %v, want %v", c.err, got, c.want)
			}
		})
	}
}

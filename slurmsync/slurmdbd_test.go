package slurmsync

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/go-sql-driver/mysql"
)

// TestCapturesBothSources: the captured database tables, loaded into a
// scratch MariaDB database and read by the slurmdbd source, give the same
// tree as the sacctmgr source reading the captured listings of that state.
func TestCapturesBothSources(t *testing.T) {
	e := needSlurm(t)
	dsn := scratchDB(t, e, fmt.Sprintf("captures_%d", os.Getpid()), false)
	loadCaptures(t, dsn)

	dbd, err := NewSlurmDBD(dsn, "hgx")
	if err != nil {
		t.Fatal(err)
	}
	defer dbd.Close()
	fromDB, err := dbd.Tree(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	checkHGX(t, fromDB)
	fromText, err := (&Sacctmgr{Cluster: "HGX", Files: captureFiles()}).Tree(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	sameTree(t, "slurmdbd vs sacctmgr captures", fromDB, fromText)

	if _, err := dbd.Tree(context.Background()); err != nil { // the pool is reusable
		t.Fatal(err)
	}
	other, _ := NewSlurmDBD(dsn, "nosuch")
	defer other.Close()
	if _, err := other.Tree(context.Background()); err == nil || !strings.Contains(err.Error(), "cluster nosuch unknown to slurmdbd") {
		t.Errorf("unknown cluster: %v", err)
	}
}

// The DSN and its password never show in errors.
func TestSlurmDBDErrorsHideDSN(t *testing.T) {
	const pw = "s3cretPW"
	for _, dsn := range []string{
		"llmflow:" + pw + "@tcp(127.0.0.1:1)/slurm_acct_db",          // nothing listens
		"llmflow:" + pw + "@tcp(127.0.0.1:3306)/slurm_acct_db?x=%zz", // bad escape
		"llmflow:" + pw + "@tcp(127.0.0.1:3306)",                     // no database
		"llmflow:" + pw + "@bogus(127.0.0.1)/slurm_acct_db",          // unknown network
		"llmflow:" + pw + "@tcp(127.0.0.1:3306)/slurm_acct_db?timeout=" + pw,
	} {
		s, err := NewSlurmDBD(dsn, "hgx")
		if err == nil {
			_, err = s.Tree(context.Background())
			s.Close()
		}
		if err == nil {
			t.Errorf("no error for a bad DSN")
			continue
		}
		if strings.Contains(err.Error(), pw) || strings.Contains(err.Error(), dsn) {
			t.Errorf("error shows the password: %v", err)
		}
		t.Logf("%v", err)
	}
	for _, c := range []string{"", "hgx`; DROP TABLE acct_table; --", "a b", "x/y", strings.Repeat("a", 70)} {
		if _, err := NewSlurmDBD("u:p@tcp(127.0.0.1:3306)/db", c); err == nil {
			t.Errorf("cluster %q accepted", c)
		}
	}
}

// A wrong password against the real server: Access denied, password hidden.
func TestSlurmDBDWrongPassword(t *testing.T) {
	e := needSlurm(t)
	cfg, _ := mysql.ParseDSN(e.roDSN)
	cfg.Passwd = "wrong-" + cfg.Passwd
	s, err := NewSlurmDBD(cfg.FormatDSN(), "hgx")
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	_, err = s.Tree(context.Background())
	if err == nil || !strings.Contains(err.Error(), "Access denied") {
		t.Fatalf("error %v", err)
	}
	if strings.Contains(err.Error(), cfg.Passwd) {
		t.Errorf("error shows the password: %v", err)
	}
}

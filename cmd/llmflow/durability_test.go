package main

import (
	"context"
	"database/sql"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	_ "modernc.org/sqlite"

	"github.com/go-llmflow/llmflow"
	"github.com/go-llmflow/llmflow/store"
)

// These tests run `llmflow serve` as a real process against real stores
// and break things under load: SIGKILL, PostgreSQL cut off, the SQLite
// file locked, a full disk. After each, every request that got a complete
// answer must have exactly one record, and the rollups count each record
// once. The counts are logged (go test -v -run TestDurability).

var allTime = [2]time.Time{time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC), time.Date(2100, 1, 1, 0, 0, 0, 0, time.UTC)}

// outage is how long a store stays broken under load: the 60 s
// for PostgreSQL and 40 s for the locked SQLite file; -short makes them
// a few seconds.
func outage(full time.Duration) time.Duration {
	if testing.Short() {
		return 3 * time.Second
	}
	return full
}

func sqliteCounts(t *testing.T, path string) ([]llmflow.Record, int64) {
	t.Helper()
	db, err := store.OpenSQLite(context.Background(), path)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	recs, err := db.Records(context.Background(), allTime[0], allTime[1])
	if err != nil {
		t.Fatal(err)
	}
	rolls, err := db.Rollups(context.Background(), allTime[0], allTime[1], llmflow.RollupFilter{})
	if err != nil {
		t.Fatal(err)
	}
	var n int64
	for _, r := range rolls {
		n += r.Requests
	}
	return recs, n
}

// TestDurabilitySIGKILLBurst kills a real gateway with SIGKILL in the
// middle of a burst (streaming and not), restarts it on the same files and
// checks that every answered request has exactly one record.
func TestDurabilitySIGKILLBurst(t *testing.T) {
	sim := startSim(t, 2*time.Millisecond)
	dir := t.TempDir()
	// Batches of 1000 and no timed flush: at the kill the store holds the
	// first batch(es) and the spool the rest, so the restart must replay.
	cfg := procConfig(t, dir, sim, "store {\n  path = \"llmflow.db\"\n  batch_size = 1000\n  flush_interval = \"1h\"\n}\n")
	p := startServe(t, cfg)
	key := createKey(t, p.base)
	l := startLoad(p.base, key, 32)
	waitFor(t, 2*time.Minute, "the load to have 1500 answers", func() bool { return l.count() >= 1500 })
	p.signal(syscall.SIGKILL)
	l.finish()
	t.Logf("burst: %s; killed with SIGKILL", l)

	p2 := startServe(t, cfg)
	waitHealth(t, p2, "the spool replayed", spoolDrained)
	p2.signal(syscall.SIGTERM)
	if c := p2.exitCode(); c != 0 {
		t.Fatalf("exit %d after SIGTERM", c)
	}
	recs, rolled := sqliteCounts(t, filepath.Join(dir, "llmflow.db"))
	extra := checkExactlyOnce(t, l, recs, rolled)
	t.Logf("records %d: every one of the %d answered requests exactly once, plus %d of requests cut by the kill; %d streams had [DONE] without a clean end",
		len(recs), l.count(), extra, len(l.doneNoEnd))
	m := regexp.MustCompile(`records of a previous run.* records=(\d+)`).FindStringSubmatch(p2.logs.String())
	if m == nil {
		t.Fatalf("the restart replayed nothing: the test did not test the replay\n%s", p2.logs)
	}
	t.Logf("the restart replayed %s records from the spool", m[1])
}

// tcpProxy forwards 127.0.0.1:port to target until cut: then it closes
// every connection and refuses new ones, until restored. It stands for
// PostgreSQL going away without stopping the machine's shared server.
type tcpProxy struct {
	ln     net.Listener
	target string
	mu     sync.Mutex
	cut    bool
	conns  map[net.Conn]bool
}

func startProxy(t *testing.T, target string) *tcpProxy {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &tcpProxy{ln: ln, target: target, conns: map[net.Conn]bool{}}
	t.Cleanup(func() { ln.Close(); p.setCut(true) })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go p.serve(c)
		}
	}()
	return p
}

func (p *tcpProxy) track(cs ...net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cut {
		return false
	}
	for _, c := range cs {
		p.conns[c] = true
	}
	return true
}

func (p *tcpProxy) serve(c net.Conn) {
	if !p.track() {
		c.Close()
		return
	}
	up, err := net.Dial("tcp", p.target)
	if err != nil || !p.track(c, up) {
		c.Close()
		if up != nil {
			up.Close()
		}
		return
	}
	go func() { copyConn(up, c) }()
	copyConn(c, up)
}

func copyConn(dst, src net.Conn) {
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			if _, werr := dst.Write(buf[:n]); werr != nil {
				break
			}
		}
		if err != nil {
			break
		}
	}
	dst.Close()
	src.Close()
}

func (p *tcpProxy) setCut(cut bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cut = cut
	if cut {
		for c := range p.conns {
			c.Close()
		}
		clear(p.conns)
	}
}

// testPGDatabase creates a database of its own on the shared PostgreSQL
// server (LLMFLOW_TEST_PG_DSN) and returns its host:port, name and DSN.
func testPGDatabase(t *testing.T) (hostport, dsn string, conn func() *pgx.Conn) {
	base := os.Getenv("LLMFLOW_TEST_PG_DSN")
	if base == "" {
		t.Skip("LLMFLOW_TEST_PG_DSN not set: no PostgreSQL to cut off")
	}
	cfg, err := pgx.ParseConfig(base)
	if err != nil {
		t.Fatal(err)
	}
	admin, err := pgx.ConnectConfig(context.Background(), cfg)
	if err != nil {
		t.Fatalf("PostgreSQL: %v", err)
	}
	name := fmt.Sprintf("llmflow_spool_%d", time.Now().UnixNano())
	if _, err := admin.Exec(context.Background(), "CREATE DATABASE "+name); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		admin.Exec(context.Background(), "DROP DATABASE IF EXISTS "+name+" WITH (FORCE)")
		admin.Close(context.Background())
	})
	hostport = net.JoinHostPort(cfg.Host, fmt.Sprint(cfg.Port))
	own := cfg.Copy()
	own.Database = name
	conn = func() *pgx.Conn {
		c, err := pgx.ConnectConfig(context.Background(), own)
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	user := cfg.User
	return hostport, fmt.Sprintf("postgres://%s@%%s/%s?sslmode=disable&connect_timeout=2", user, name), conn
}

// TestDurabilityPostgresCutOff runs a real gateway on PostgreSQL through a
// TCP proxy of the test, under load, and cuts the proxy for a minute
// (PostgreSQL itself keeps running: other engineers use it). /healthz and
// the metrics say so while it lasts; afterwards the spool drains and every
// answered request has exactly one record.
func TestDurabilityPostgresCutOff(t *testing.T) {
	hostport, dsnFmt, conn := testPGDatabase(t)
	proxy := startProxy(t, hostport)
	sim := startSim(t, 2*time.Millisecond)
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "pg.dsn"), []byte(fmt.Sprintf(dsnFmt, proxy.ln.Addr().String())+"\n"), 0o600)
	cfg := procConfig(t, dir, sim, "store {\n  kind = \"postgres\"\n  dsn_file = \"pg.dsn\"\n  fail_closed = false\n  flush_interval = \"100ms\"\n}\n")
	p := startServe(t, cfg)
	key := createKey(t, p.base)
	l := startLoad(p.base, key, 8)
	waitFor(t, 2*time.Minute, "the load to have 200 answers", func() bool { return l.count() >= 200 })
	proxy.setCut(true)
	before := l.count()
	waitHealth(t, p, "/healthz to say store writes fail", func(code int, h map[string]any) bool {
		return h["status"] == "degraded" && acctField(h, "store_writes") == "failing"
	})
	d := outage(60 * time.Second)
	time.Sleep(d)
	_, h := healthDetails(p.base)
	during := l.count() - before
	metrics := scrape(t, p.base)
	proxy.setCut(false)
	t.Logf("PostgreSQL cut off for %v under load: %d requests answered meanwhile; /healthz %v store_writes=%v spool_records=%v; %s",
		d, during, h["status"], acctField(h, "store_writes"), acctField(h, "spool_records"), grepLines(metrics, "llmflow_accounting_store_failing", "llmflow_accounting_spool_records"))
	if !strings.Contains(metrics, "llmflow_accounting_store_failing 1") {
		t.Errorf("llmflow_accounting_store_failing is not 1 during the cut")
	}
	time.Sleep(time.Second) // more load after the return
	l.finish()
	waitHealth(t, p, "the spool drained", spoolDrained)
	p.signal(syscall.SIGTERM)
	if c := p.exitCode(); c != 0 {
		t.Fatalf("exit %d after SIGTERM:\n%s", c, tail(p.logs.String(), 3000))
	}
	c := conn()
	defer c.Close(context.Background())
	rows, err := c.Query(context.Background(), "SELECT request_id FROM records")
	if err != nil {
		t.Fatal(err)
	}
	var recs []llmflow.Record
	for rows.Next() {
		var r llmflow.Record
		rows.Scan(&r.RequestID)
		recs = append(recs, r)
	}
	var rolled int64
	c.QueryRow(context.Background(), "SELECT COALESCE(sum(requests), 0) FROM rollups").Scan(&rolled)
	extra := checkExactlyOnce(t, l, recs, rolled)
	t.Logf("%s; records %d (answered %d exactly once, %d others)", l, len(recs), l.count(), extra)
}

func scrape(t *testing.T, base string) string {
	out, err := exec.Command("curl", "-s", base+"/metrics").Output()
	if err != nil {
		t.Logf("curl /metrics: %v", err)
	}
	return string(out)
}

func grepLines(s string, prefixes ...string) string {
	var out []string
	for _, line := range strings.Split(s, "\n") {
		for _, p := range prefixes {
			if strings.HasPrefix(line, p+" ") {
				out = append(out, line)
			}
		}
	}
	return strings.Join(out, ", ")
}

// TestDurabilitySQLiteLocked holds the SQLite file's write lock from
// another connection (BEGIN EXCLUSIVE) under load, as a backup tool or a
// stray sqlite3 shell would.
func TestDurabilitySQLiteLocked(t *testing.T) {
	sim := startSim(t, 2*time.Millisecond)
	dir := t.TempDir()
	cfg := procConfig(t, dir, sim, "store {\n  path = \"llmflow.db\"\n  fail_closed = false\n  flush_interval = \"100ms\"\n}\n")
	p := startServe(t, cfg)
	key := createKey(t, p.base)
	l := startLoad(p.base, key, 8)
	waitFor(t, 2*time.Minute, "the load to have 100 answers", func() bool { return l.count() >= 100 })
	db, err := sql.Open("sqlite", filepath.Join(dir, "llmflow.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	lock, err := db.Conn(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	// The gateway writes all the time: retry until the lock is ours.
	for try := 0; ; try++ {
		_, err := lock.ExecContext(context.Background(), "BEGIN EXCLUSIVE")
		if err == nil {
			break
		}
		if try == 1000 {
			t.Fatal(err)
		}
		time.Sleep(10 * time.Millisecond)
	}
	before := l.count()
	waitHealth(t, p, "/healthz to say store writes fail", func(code int, h map[string]any) bool {
		return acctField(h, "store_writes") == "failing"
	})
	d := outage(40 * time.Second)
	time.Sleep(d)
	_, h := healthDetails(p.base)
	during := l.count() - before
	lock.ExecContext(context.Background(), "ROLLBACK")
	lock.Close()
	t.Logf("SQLite file locked for %v under load: %d requests answered meanwhile; /healthz %v store_writes=%v spool_records=%v",
		d, during, h["status"], acctField(h, "store_writes"), acctField(h, "spool_records"))
	l.finish()
	waitHealth(t, p, "the spool drained", spoolDrained)
	p.signal(syscall.SIGTERM)
	if c := p.exitCode(); c != 0 {
		t.Fatalf("exit %d", c)
	}
	recs, rolled := sqliteCounts(t, filepath.Join(dir, "llmflow.db"))
	extra := checkExactlyOnce(t, l, recs, rolled)
	t.Logf("%s; records %d (answered %d exactly once, %d others)", l, len(recs), l.count(), extra)
}

// TestDurabilityFullDisk puts the SQLite file and the spool on a small
// tmpfs made by the test and fills it under load: the store and the spool
// both refuse, so with fail_closed (the default) requests are refused
// before the engine (503, /healthz 503) rather than answered with records
// nowhere to go; the records already taken wait in memory, and once space
// is freed they go to the spool and the store, and requests are answered
// again, every one recorded exactly once.
func TestDurabilityFullDisk(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("mounting a tmpfs needs root: full-disk test skipped")
	}
	mnt := t.TempDir()
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size=16m", "tmpfs", mnt).CombinedOutput(); err != nil {
		t.Skipf("cannot mount a tmpfs (%v: %s): full-disk test skipped", err, out)
	}
	t.Cleanup(func() { exec.Command("umount", "-l", mnt).Run() })
	sim := startSim(t, 2*time.Millisecond)
	dir := t.TempDir()
	cfg := procConfig(t, dir, sim, fmt.Sprintf("store {\n  path = %q\n  spool_dir = %q\n  flush_interval = \"100ms\"\n}\n",
		filepath.Join(mnt, "llmflow.db"), filepath.Join(mnt, "spool")))
	p := startServe(t, cfg)
	key := createKey(t, p.base)
	l := startLoad(p.base, key, 8)
	waitFor(t, 2*time.Minute, "the load to have 100 answers", func() bool { return l.count() >= 100 })
	filler := filepath.Join(mnt, "filler")
	f, err := os.Create(filler)
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 64<<10)
	for {
		if _, err := f.Write(buf); err != nil {
			break
		}
	}
	f.Close()
	before := l.count()
	waitHealth(t, p, "/healthz to say the spool refuses", func(code int, h map[string]any) bool {
		return code == 503 && h["status"] == "unavailable" && acctField(h, "spool") == "refusing"
	})
	waitFor(t, 2*time.Minute, "requests refused (503) while no record could be kept", func() bool { return l.refused(http.StatusServiceUnavailable) >= 100 })
	_, h := healthDetails(p.base)
	during := l.count() - before
	os.Remove(filler)
	t.Logf("disk full: %d requests answered meanwhile, %d refused; /healthz %v spool=%v in_memory=%v store_writes=%v",
		during, l.refused(http.StatusServiceUnavailable), h["status"], acctField(h, "spool"), acctField(h, "in_memory"), acctField(h, "store_writes"))
	after := l.count()
	waitFor(t, 2*time.Minute, "answers again once space is freed", func() bool { return l.count() >= after+100 })
	l.finish()
	waitHealth(t, p, "memory and spool drained", spoolDrained)
	p.signal(syscall.SIGTERM)
	if c := p.exitCode(); c != 0 {
		t.Fatalf("exit %d", c)
	}
	recs, rolled := sqliteCounts(t, filepath.Join(mnt, "llmflow.db"))
	extra := checkExactlyOnce(t, l, recs, rolled)
	t.Logf("%s; records %d (answered %d exactly once, %d others)", l, len(recs), l.count(), extra)
}

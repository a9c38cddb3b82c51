// Package doctor checks what a gateway configuration depends on, the way a
// new administrator would by hand before the first `llmflow serve`: the
// secret files, the store, Redis, every upstream engine, the Slurm source
// and the clock. Each check says what is wrong and how to fix it; nothing
// is changed (the store is probed read-only, the engines get one request
// of one token where priority scheduling is checked).
package doctor

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net/http"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/go-llmflow/llmflow/config"
)

// Status is how a check ended.
type Status int

const (
	OK   Status = iota
	Warn        // not wrong in itself, worth a look
	Fail        // serve will not work as configured
)

func (s Status) String() string {
	switch s {
	case OK:
		return "ok"
	case Warn:
		return "warn"
	}
	return "FAIL"
}

// Finding is the result of one check.
type Finding struct {
	Check   string // what was checked: "secrets", "store", "redis", `upstream "gpu01" of model "m"`, "slurm", "clock"
	Status  Status
	Message string // what was found; never a secret
	Fix     string // what to do, for Warn and Fail
}

// Options are the doctor's dependencies; the zero value is the real ones.
type Options struct {
	// HTTP is the client for the upstreams (default: no proxy from the
	// environment, no redirects, Timeout per request).
	HTTP *http.Client
	// Timeout bounds each check's network calls; default 5s.
	Timeout time.Duration
	// Now is the local clock; default time.Now.
	Now func() time.Time
	// LookPath finds a command (sacctmgr); default exec.LookPath.
	LookPath func(string) (string, error)
	// MaxSkew is the clock difference to a reference (the database,
	// Redis, an engine's Date) beyond which the clock check fails;
	// default 2s.
	MaxSkew time.Duration
}

func (o *Options) defaults() {
	o.Timeout = cmp.Or(o.Timeout, 5*time.Second)
	o.MaxSkew = cmp.Or(o.MaxSkew, 2*time.Second)
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.LookPath == nil {
		o.LookPath = exec.LookPath
	}
	if o.HTTP == nil {
		o.HTTP = &http.Client{
			Timeout:       o.Timeout,
			Transport:     &http.Transport{Proxy: nil, ResponseHeaderTimeout: o.Timeout},
			CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
		}
	}
}

// clockRef is another system's clock as read at local time at: what the
// clock check compares against.
type clockRef struct {
	source     string
	theirs, at time.Time
	resolution time.Duration // an HTTP Date has whole seconds
}

// run is one doctor run's shared state.
type run struct {
	cfg *config.Config
	o   Options

	mu       sync.Mutex
	findings []Finding
	clocks   []clockRef
}

func (r *run) add(f Finding) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.findings = append(r.findings, f)
}

func (r *run) clock(c clockRef) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.clocks = append(r.clocks, c)
}

// Run checks what cfg depends on and returns the findings, in a stable
// order: secrets, store, redis, upstreams (in configuration order), Slurm
// source, write-back, clock. The configuration itself was checked when cfg
// was loaded.
func Run(ctx context.Context, cfg *config.Config, o Options) []Finding {
	o.defaults()
	r := &run{cfg: cfg, o: o}
	r.checkSecrets()
	// The checks that talk to the network run at once; each adds its
	// findings under its own name, sorted below.
	var wg sync.WaitGroup
	wg.Go(func() { r.checkStore(ctx) })
	if cfg.Redis != nil {
		wg.Go(func() { r.checkRedis(ctx) })
	}
	for _, m := range cfg.Models {
		for _, u := range m.Upstreams {
			wg.Go(func() { r.checkUpstream(ctx, m, u) })
		}
	}
	if cfg.Slurm != nil {
		wg.Go(func() { r.checkSlurm(ctx) })
	}
	if cfg.Writeback != nil {
		wg.Go(func() { r.checkWriteback(ctx) })
	}
	wg.Wait()
	r.checkClock()
	order := func(f Finding) int {
		for i, p := range []string{"secrets", "store", "redis", "upstream", "slurm", "writeback", "clock"} {
			if strings.HasPrefix(f.Check, p) {
				return i
			}
		}
		return 99
	}
	upstreamOrder := map[string]int{}
	for _, m := range cfg.Models {
		for _, u := range m.Upstreams {
			upstreamOrder[upstreamCheck(m, u)] = len(upstreamOrder)
		}
	}
	slices.SortStableFunc(r.findings, func(a, b Finding) int {
		return cmp.Or(cmp.Compare(order(a), order(b)), cmp.Compare(upstreamOrder[a.Check], upstreamOrder[b.Check]))
	})
	return r.findings
}

// Failed reports whether any finding is a failure.
func Failed(fs []Finding) bool {
	return slices.ContainsFunc(fs, func(f Finding) bool { return f.Status == Fail })
}

// checkSecrets reports every secret file that serve would refuse (missing,
// unreadable, open to group or others, a master key too short).
func (r *run) checkSecrets() {
	err := config.CheckSecrets(r.cfg)
	var ds config.Diagnostics
	if !errors.As(err, &ds) {
		if err != nil {
			r.add(Finding{Check: "secrets", Status: Fail, Message: err.Error()})
			return
		}
		r.add(Finding{Check: "secrets", Status: OK, Message: fmt.Sprintf("%d secret files readable, mode 0600 or stricter", len(r.cfg.Secrets()))})
		return
	}
	for _, d := range ds {
		fix := "create it, readable by the service user alone: (umask 077; openssl rand -hex 32 > FILE) for a key, or the secret it names"
		switch {
		case strings.Contains(d.Message, "chmod 600"):
			fix = "chmod 600 the file (and chown it to the service user, llmflow)"
		case strings.Contains(d.Message, "master key is"):
			fix = "(umask 077; openssl rand -hex 32 > FILE): at least 32 bytes"
		case strings.Contains(d.Message, "permission denied"):
			fix = "run doctor as the service user (sudo -u llmflow llmflow doctor …) or chown the file to it"
		}
		r.add(Finding{Check: "secrets", Status: Fail, Message: d.String(), Fix: fix})
	}
}

// checkClock compares the local clock with every reference read by the
// other checks.
func (r *run) checkClock() {
	if len(r.clocks) == 0 {
		r.add(Finding{Check: "clock", Status: Warn, Message: "no reference answered (no PostgreSQL, Redis or engine)",
			Fix: "check that the host's clock is synchronised (timedatectl, chronyc tracking): budget periods, reports and Redis leases follow it"})
		return
	}
	// The largest difference, less what the reference's resolution
	// explains (an HTTP Date is truncated to the second).
	off := func(c clockRef) time.Duration {
		skew := c.at.Sub(c.theirs)
		return max(max(skew, -skew)-c.resolution, 0)
	}
	worst := r.clocks[0]
	for _, c := range r.clocks[1:] {
		if off(c) > off(worst) {
			worst = c
		}
	}
	worstAbs := off(worst)
	skew := worst.at.Sub(worst.theirs).Round(time.Millisecond)
	if worstAbs > r.o.MaxSkew {
		r.add(Finding{Check: "clock", Status: Fail,
			Message: fmt.Sprintf("this host's clock is %v off %s's", skew, worst.source),
			Fix:     "synchronise the clocks with NTP (chrony) on this host and the other: budget periods, reports and Redis leases follow them"})
		return
	}
	r.add(Finding{Check: "clock", Status: OK, Message: fmt.Sprintf("within %v of %d references (the largest difference: %v to %s)", r.o.MaxSkew, len(r.clocks), skew, worst.source)})
}

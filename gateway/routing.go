package gateway

import (
	"context"
	"encoding/json"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/go-llmflow/llmflow"
	"github.com/go-llmflow/llmflow/config"
	"github.com/go-llmflow/llmflow/engine"
)

// routingState is the runtime part of routing: the upstreams and aliases
// of the admin API on top of the configuration.
//
// The request path never takes mu. What it reads is published whole: each
// route's upstream list (route.ups) and the alias table (aliases), both
// copy-on-write snapshots behind atomic pointers, rebuilt under mu by
// apply from the stored rows and the configuration. A request that picked
// an upstream or a route keeps it until it ends, even when a change
// removes it meanwhile.
//
// The configuration is authoritative for what it declares: a stored row
// that a configured name shadows (an upstream named like a configured one
// of its model, an alias named like a configured model) or that names a
// model the configuration no longer has is not served, and listed with
// the reason; the admin API refuses to write such a row in the first
// place (CheckUpstream, CheckAlias: the same rules).
type routingState struct {
	aliases atomic.Pointer[aliasTable]
	all     atomic.Pointer[[]*backend] // every backend in use (healthz)

	mu         sync.Mutex
	upstreams  []llmflow.RuntimeUpstream // as stored, applied
	aliasRows  []llmflow.ModelAlias
	ignored    map[string]string               // rowKey → why it is not served
	backends   map[string]*backend             // base URL → backend, configured and runtime
	configured map[*backend]bool               // backends of the configuration
	probes     map[*backend]context.CancelFunc // runtime backends' health probes
	ctx        context.Context                 // Start's, nil before: probes start with it
	wg         sync.WaitGroup                  // probe goroutines
}

// aliasTable is the published alias snapshot: alias → route, and the
// /v1/models cards (configured models, then aliases by name).
type aliasTable struct {
	routes map[string]*route
	cards  []modelCard
}

// routeOf resolves a client model name: a configured model, else an
// alias. One map lookup, one more with an atomic load for an alias.
func (g *Gateway) routeOf(name string) *route {
	if rt := g.routes[name]; rt != nil {
		return rt
	}
	return g.routing.aliases.Load().routes[name]
}

// allBackends returns every backend in use, configured and runtime.
func (g *Gateway) allBackends() []*backend { return *g.routing.all.Load() }

// initRouting sets up runtime routing (New, after newRoutes): the
// configured routes only, until the control plane applies the stored rows
// (ApplyRouting).
func (g *Gateway) initRouting() {
	rs := &routingState{
		backends: make(map[string]*backend), configured: make(map[*backend]bool),
		probes:  make(map[*backend]context.CancelFunc),
		ignored: map[string]string{},
	}
	for _, b := range g.backends {
		rs.backends[b.base] = b
		rs.configured[b] = true
	}
	all := slices.Clone(g.backends)
	rs.all.Store(&all)
	rs.aliases.Store(&aliasTable{cards: g.models})
	g.routing = rs
}

func upstreamKey(model, name string) string { return "upstream\x00" + model + "\x00" + name }
func aliasKey(name string) string           { return "alias\x00" + name }

// upstreamName is the rule for the name of a runtime upstream: like a
// label of the configuration, letters, digits, '.', '_', '-', at most 64.
func checkUpstreamName(name string) error {
	if name == "" || len(name) > 64 {
		return &llmflow.Error{Code: llmflow.EINVALID, Param: "name", Message: "upstream name must be 1 to 64 characters"}
	}
	for _, c := range name {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-') {
			return &llmflow.Error{Code: llmflow.EINVALID, Param: "name", Message: "upstream name may hold letters, digits, '.', '_' and '-' only"}
		}
	}
	return nil
}

// checkAliasName is the rule for an alias: a model name as clients send
// it (slashes and colons allowed), printable, no spaces, at most 256 bytes.
func checkAliasName(name string) error {
	if name == "" || len(name) > 256 || !utf8.ValidString(name) {
		return &llmflow.Error{Code: llmflow.EINVALID, Param: "name", Message: "alias must be 1 to 256 bytes of UTF-8"}
	}
	for _, c := range name {
		if unicode.IsSpace(c) || !unicode.IsPrint(c) {
			return &llmflow.Error{Code: llmflow.EINVALID, Param: "name", Message: "alias must not hold spaces or control characters"}
		}
	}
	return nil
}

// checkRuntimeUpstream checks u against the configuration and the runtime
// upstreams accepted before it (accepted, by model); it returns u's parsed
// base URL. The same rules answer the admin API (with these errors) and
// decide which stored rows are served.
func (g *Gateway) checkRuntimeUpstream(u llmflow.RuntimeUpstream, accepted map[string][]acceptedUpstream) (*url.URL, error) {
	rt := g.routes[u.Model]
	if rt == nil {
		return nil, llmflow.Errorf(llmflow.ENOTFOUND, "no configured model %s (runtime upstreams extend models of the configuration)", quote(u.Model))
	}
	if err := checkUpstreamName(u.Name); err != nil {
		return nil, err
	}
	base, err := config.ParseUpstreamURL(u.BaseURL)
	if err != nil {
		return nil, &llmflow.Error{Code: llmflow.EINVALID, Param: "base_url", Message: "base_url: " + err.Error()}
	}
	bs := base.String()
	for _, c := range rt.configured {
		if c.name == u.Name {
			return nil, llmflow.Errorf(llmflow.ECONFLICT, "upstream %s of model %s is declared in the configuration, which is authoritative: change or remove it there", quote(u.Name), quote(u.Model))
		}
		if c.b.base == bs {
			return nil, llmflow.Errorf(llmflow.ECONFLICT, "model %s already has this base_url as its configured upstream %s", quote(u.Model), quote(c.name))
		}
	}
	for _, a := range accepted[u.Model] {
		if a.base == bs {
			return nil, llmflow.Errorf(llmflow.ECONFLICT, "model %s already has this base_url as its upstream %s", quote(u.Model), quote(a.name))
		}
	}
	// in a pool an upstream name means one engine (it labels the
	// upstream's metrics), as the configuration requires
	pool := rt.pool.name
	for _, other := range g.cfg.Models {
		if other.Pool != pool {
			continue
		}
		for _, c := range other.Upstreams {
			if c.Name == u.Name && c.BaseURL.String() != bs {
				return nil, llmflow.Errorf(llmflow.ECONFLICT, "in pool %s the upstream name %s is a configured engine with another base_url (model %s); give each engine its own name", quote(pool), quote(u.Name), quote(other.Name))
			}
		}
		for _, a := range accepted[other.Name] {
			if a.name == u.Name && a.base != bs {
				return nil, llmflow.Errorf(llmflow.ECONFLICT, "in pool %s the upstream name %s is another engine (model %s); give each engine its own name", quote(pool), quote(u.Name), quote(other.Name))
			}
		}
	}
	return base, nil
}

type acceptedUpstream struct {
	name, base string
	u          *url.URL
	inheritKey bool     // send the model's key (an admin's explicit choice)
	authHdr    []string // its own key (key_name), or nil
}

// checkAlias checks an alias against the configuration.
func (g *Gateway) checkAlias(a llmflow.ModelAlias) error {
	if err := checkAliasName(a.Name); err != nil {
		return err
	}
	if g.routes[a.Name] != nil {
		return llmflow.Errorf(llmflow.ECONFLICT, "%s is a configured model, which is authoritative: an alias cannot take its name", quote(a.Name))
	}
	if g.routes[a.Model] == nil {
		return &llmflow.Error{Code: llmflow.EINVALID, Param: "model", Message: "an alias names a configured model; " + quote(a.Model) + " is none"}
	}
	return nil
}

// applyLocked rebuilds and publishes the routes' upstream lists and the
// alias table from the stored rows (rs.mu held): rows the configuration
// shadows are left out with their reason; runtime backends no longer used
// stop being probed, new ones start (down until their first good probe).
func (g *Gateway) applyLocked(ups []llmflow.RuntimeUpstream, als []llmflow.ModelAlias) {
	rs := g.routing
	ignored := map[string]string{}
	accepted := map[string][]acceptedUpstream{}
	for _, u := range ups {
		base, err := g.checkRuntimeUpstream(u, accepted)
		var auth []string
		if err == nil && u.KeyName != "" {
			var key string
			if key, err = g.upstreamKey(u.KeyName); err == nil {
				auth = []string{"Bearer " + key}
			}
		}
		if err != nil {
			ignored[upstreamKey(u.Model, u.Name)] = llmflow.ErrorMessage(err)
			continue
		}
		accepted[u.Model] = append(accepted[u.Model], acceptedUpstream{name: u.Name, base: base.String(), u: base, inheritKey: u.InheritKey, authHdr: auth})
	}
	// backends: reuse the state of an engine already known by its URL
	inUse := map[*backend]bool{}
	lists := map[*route][]*upstream{}
	for _, mc := range g.cfg.Models {
		rt := g.routes[mc.Name]
		list := rt.configured
		if extra := accepted[mc.Name]; len(extra) > 0 {
			list = slices.Clip(slices.Clone(rt.configured))
			for _, a := range extra {
				b := rs.backends[a.base]
				if b == nil {
					b = &backend{base: a.base, pool: rt.pool.name, name: a.name}
				}
				inUse[b] = true
				up := &upstream{name: a.name, b: b}
				switch {
				case a.authHdr != nil: // its own key
					up.authHdr = a.authHdr
				case a.inheritKey: // else no key: the engine is whoever registered it
					up.authHdr = rt.authHdr
				}
				ok := true
				for ep := range engine.NumEndpoints {
					var err error
					if up.urls[ep], err = url.Parse(a.base + ep.Path()); err != nil {
						ok = false // not for a URL that parsed once; as newRoutes
					}
				}
				if ok {
					list = append(list, up)
				}
			}
		}
		lists[rt] = list
	}
	// start what is new before publishing, stop what is gone after
	for b := range inUse {
		if rs.backends[b.base] == nil {
			rs.backends[b.base] = b
			g.startBackendLocked(b)
		}
	}
	for rt, list := range lists {
		if cur := rt.ups.Load(); !sameUpstreams(cur.list, list) {
			rt.ups.Store(&upstreamSet{list: list})
		}
	}
	all := slices.Clone(g.backends)
	for base, b := range rs.backends {
		if rs.configured[b] {
			continue
		}
		if !inUse[b] {
			delete(rs.backends, base)
			g.stopBackendLocked(b)
			continue
		}
		all = append(all, b)
	}
	rs.all.Store(&all)

	at := &aliasTable{routes: map[string]*route{}, cards: slices.Clip(g.models)}
	for _, a := range als {
		if err := g.checkAlias(a); err != nil {
			ignored[aliasKey(a.Name)] = llmflow.ErrorMessage(err)
			continue
		}
		at.routes[a.Name] = g.routes[a.Model]
		at.cards = append(at.cards, modelCard{ID: a.Name, Object: "model", Created: a.UpdatedAt.Unix(), OwnedBy: "llmflow"})
	}
	rs.aliases.Store(at)
	rs.upstreams, rs.aliasRows, rs.ignored = ups, als, ignored
	for k, why := range ignored {
		g.log.Warn("stored routing row not served", "row", strings.ReplaceAll(k, "\x00", " "), "reason", why)
	}
}

// sameUpstreams reports whether two lists route alike (same names, same
// engines, same key sent), so that an unrelated change keeps a route's
// list.
func sameUpstreams(a, b []*upstream) bool {
	return slices.EqualFunc(a, b, func(x, y *upstream) bool {
		return x.name == y.name && x.b == y.b && slices.Equal(x.authHdr, y.authHdr)
	})
}

// startBackendLocked probes a new runtime backend (when the gateway
// runs); it stays out of rotation until its first good probe, so an
// engine added before it is ready gets no traffic. Its gauges come with
// allBackends (backendCollector).
func (g *Gateway) startBackendLocked(b *backend) {
	if g.routing.ctx != nil {
		g.probeLocked(b)
	}
}

// probeLocked starts the health probe of a runtime backend.
func (g *Gateway) probeLocked(b *backend) {
	rs := g.routing
	b.downUntil.Store(g.now().Add(100 * 365 * 24 * time.Hour).UnixNano())
	ctx, cancel := context.WithCancel(rs.ctx)
	rs.probes[b] = cancel
	rs.wg.Go(func() { g.health.loop(ctx, b) })
}

func (g *Gateway) stopBackendLocked(b *backend) {
	rs := g.routing
	if cancel := rs.probes[b]; cancel != nil {
		cancel()
		delete(rs.probes, b)
	}
}

// runRuntimeProbes probes the runtime backends until ctx ends (Start);
// backends added later are probed from their addition.
func (g *Gateway) runRuntimeProbes(ctx context.Context) {
	rs := g.routing
	rs.mu.Lock()
	rs.ctx = ctx
	for _, b := range rs.backends {
		if !rs.configured[b] {
			g.probeLocked(b)
		}
	}
	rs.mu.Unlock()
	<-ctx.Done()
	rs.mu.Lock()
	rs.ctx = nil // a change from now on starts no probe
	rs.mu.Unlock()
	rs.wg.Wait()
}

// routingSnapshot returns the applied rows and why some are not served.
func (g *Gateway) routingSnapshot() ([]llmflow.RuntimeUpstream, []llmflow.ModelAlias, map[string]string) {
	rs := g.routing
	rs.mu.Lock()
	defer rs.mu.Unlock()
	return slices.Clone(rs.upstreams), slices.Clone(rs.aliasRows), rs.ignored
}

func quote(s string) string { b, _ := json.Marshal(s); return string(b) }

// CheckUpstreamKey checks the name of a runtime upstream's own key
// (key_name): a file name (no path) in the configuration's upstream_key_dir
// holding a secret that only its owner may read.
func (g *Gateway) CheckUpstreamKey(name string) error {
	_, err := g.upstreamKey(name)
	return err
}

// upstreamKey reads the key of a runtime upstream named name in the
// configuration's upstream_key_dir. A name is a file name: an admin can
// never make the gateway read another file (the master key) with it.
func (g *Gateway) upstreamKey(name string) (string, error) {
	bad := func(format string, args ...any) error {
		e := llmflow.Errorf(llmflow.EINVALID, format, args...)
		e.Param = "key_name"
		return e
	}
	dir := g.cfg.UpstreamKeyDir
	switch {
	case dir == "":
		return "", bad("the configuration has no upstream_key_dir: a runtime upstream can get the model's key (inherit_key) or none")
	case name == "" || name == "." || name == ".." || strings.ContainsAny(name, "/\\\x00") || name != filepath.Base(name) || strings.HasPrefix(name, "."):
		return "", bad("key_name %s is not a file name of upstream_key_dir", quote(name))
	}
	path := filepath.Join(dir, name)
	fi, err := os.Lstat(path)
	switch {
	case err != nil:
		return "", bad("no key file %s in upstream_key_dir", quote(name))
	case !fi.Mode().IsRegular():
		return "", bad("key file %s in upstream_key_dir is not a regular file", quote(name))
	case fi.Mode().Perm()&0o077 != 0:
		return "", bad("key file %s in upstream_key_dir may be read by others (mode %v): chmod 600 it", quote(name), fi.Mode().Perm())
	}
	key, err := config.ReadSecret(path)
	if err != nil {
		return "", bad("key file %s in upstream_key_dir cannot be read (empty, or too large)", quote(name))
	}
	return key, nil
}

package gateway

import (
	"cmp"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/go-llmflow/llmflow"
	"github.com/go-llmflow/llmflow/budgets"
	"github.com/go-llmflow/llmflow/fairshare"
)

// Me is the answer of GET /v1/me: what a key holder may know about their
// own key without an admin token, answered from the gateway's memory
// (the key cache, the budget ledger, the fair-share counters), as
// admission sees it. It never carries the secret or its hash.
type Me struct {
	Object   string     `json:"object"` // "me"
	Key      MeKey      `json:"key"`
	Scopes   MeScopes   `json:"scopes"`
	Models   []string   `json:"models"`
	Limits   MeLimits   `json:"limits"`
	Budgets  []MeBudget `json:"budgets"`
	Share    []MePool   `json:"fair_share"`
	Time     time.Time  `json:"time"`
	Warnings []string   `json:"warnings,omitempty"`
}

// MeKey is the calling key, as listings show it.
type MeKey struct {
	ID        string    `json:"id"`
	Name      string    `json:"name"`
	Hint      string    `json:"hint"`
	Owner     string    `json:"owner,omitempty"`
	Tags      []string  `json:"tags"`
	CreatedAt time.Time `json:"created_at"`
	ExpiresAt time.Time `json:"expires_at,omitzero"` // absent: never
	// PreviousValidUntil is when the secret before the key's last
	// rotation stops working (absent: none works).
	PreviousValidUntil time.Time `json:"previous_valid_until,omitzero"`
}

// MeScopes is where the key's requests count: its organisation (in the
// tree served now), team, project and owner (the Slurm user).
type MeScopes struct {
	Org     string `json:"org"`
	Team    string `json:"team"`
	Project string `json:"project,omitempty"`
	User    string `json:"user,omitempty"`
}

// MeLimits are the key's limits (0: unlimited) and what counts against
// them now on this gateway: requests in flight, requests and tokens in
// the last 60 s.
type MeLimits struct {
	RPM                int   `json:"rpm"`
	TPM                int   `json:"tpm"`
	MaxInFlight        int   `json:"max_inflight"`
	InFlight           int64 `json:"in_flight"`
	RequestsLastMinute int64 `json:"requests_last_minute"`
	TokensLastMinute   int64 `json:"tokens_last_minute"`
}

// MeBudget is one budget the key's requests draw on, in GPU-hours:
// Remaining is what is left of its limit (with increases) after what was
// spent and what requests in flight hold.
type MeBudget struct {
	Kind      string    `json:"kind"` // org, team, project, key or tag
	Name      string    `json:"name"`
	Model     string    `json:"model,omitempty"` // "" for every model
	Period    string    `json:"period"`
	PeriodEnd time.Time `json:"period_end"`
	Limit     float64   `json:"limit"`
	Spent     float64   `json:"spent"`
	Held      float64   `json:"held"`
	Remaining float64   `json:"remaining"`
}

// MePool is the key's fair-share standing in one pool its models run on:
// the accounts its requests count under (organisation first, then team,
// projects and the owner's user association), and the priority a request
// sent now would get.
type MePool struct {
	Pool      string      `json:"pool"`
	Capacity  int         `json:"capacity"`
	InFlight  int64       `json:"in_flight"`
	Borrowing int64       `json:"borrowing"`
	Accounts  []MeAccount `json:"accounts"`
	// Priority is what a request sent now would get (0 best):
	// interactive and batch.
	Priority MePriority `json:"priority"`
	// Standing says where that priority comes from: "within" its
	// reservation, "borrowing_sibling" (over its own, inside its
	// organisation's), "borrowing" (over its organisation's) or
	// "unknown" (its organisation is not in the pool's tree).
	Standing string `json:"standing"`
}

// MePriority is the priority of an interactive and of a batch request.
type MePriority struct {
	Interactive int `json:"interactive"`
	Batch       int `json:"batch"`
}

// MeAccount is one account of the key's chain in a pool, in sshare's
// terms plus the reservation columns.
type MeAccount struct {
	Account   string          `json:"account"`
	Kind      string          `json:"kind"` // org, team, project or user
	Reserved  int64           `json:"reserved"`
	InFlight  int64           `json:"in_flight"`
	Within    int64           `json:"within"`
	Borrowing int64           `json:"borrowing"`
	RawShares float64         `json:"raw_shares"`
	RawUsage  float64         `json:"raw_usage"` // decayed GPU-hours
	LevelFS   fairshare.Value `json:"level_fs"`
	FairShare fairshare.Value `json:"fair_share"`
}

// me answers GET /v1/me for the key of the request: a revoked or unknown
// key is refused as on every /v1 route; a key of a disabled account is
// answered (its holder may see why it is refused) with a warning.
func (g *Gateway) me(w http.ResponseWriter, r *http.Request) error {
	ck, err := g.authenticate(r)
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, g.meOf(&ck.key))
}

// meOf is what GET /v1/me answers for k.
func (g *Gateway) meOf(k *llmflow.Key) Me {
	now := g.now()
	view := g.accts.Load()
	org := view.orgOf(k)
	out := Me{Object: "me", Time: now.UTC(),
		Key: MeKey{ID: k.ID, Name: k.Name, Hint: k.Hint, Owner: k.Owner, Tags: slices.Clone(k.Tags), CreatedAt: k.CreatedAt,
			ExpiresAt: k.ExpiresAt},
		Scopes:  MeScopes{Org: org, Team: k.Team, Project: k.Project, User: k.Owner},
		Limits:  MeLimits{RPM: k.RPM, TPM: k.TPM, MaxInFlight: k.MaxInFlight},
		Budgets: []MeBudget{}, Share: []MePool{}, Models: []string{},
	}
	if out.Key.Tags == nil {
		out.Key.Tags = []string{}
	}
	if k.PrevHash != ([32]byte{}) && now.Before(k.PrevExpiresAt) {
		out.Key.PreviousValidUntil = k.PrevExpiresAt
	}
	if !k.Active() {
		out.Warnings = append(out.Warnings, "the key is deactivated: requests are refused")
	}
	if view.disabled(k) {
		out.Warnings = append(out.Warnings, "the key's team, organisation or project is disabled or no longer in the account tree: requests are refused")
	}
	ks := g.bud.mem.Key(k.ID)
	out.Limits.InFlight = ks.InFlight()
	out.Limits.RequestsLastMinute, out.Limits.TokensLastMinute = ks.Window(now)

	// the budgets of the key's chain (budgets.Table.Chain's scopes)
	mine := map[budgets.Scope]bool{}
	for _, s := range []budgets.Scope{{Kind: budgets.KindOrg, Name: org}, {Kind: budgets.KindTeam, Name: k.Team},
		{Kind: budgets.KindProject, Name: k.Project}, {Kind: budgets.KindKey, Name: k.ID}} {
		if s.Name != "" {
			mine[s] = true
		}
	}
	for _, t := range k.Tags {
		mine[budgets.Scope{Kind: budgets.KindTag, Name: t}] = true
	}
	if k.Owner != "" { // its owner's user association in the key's account
		mine[budgets.Scope{Kind: budgets.KindUser, Name: budgets.UserScopeName(cmp.Or(k.Project, k.Team), k.Owner)}] = true
	}
	for _, s := range g.bud.mem.Table().StatusWhere(func(sc budgets.Scope) bool { return mine[budgets.Scope{Kind: sc.Kind, Name: sc.Name}] }) {
		out.Budgets = append(out.Budgets, MeBudget{
			Kind: string(s.Kind), Name: s.Name, Model: s.Model, Period: string(s.Period), PeriodEnd: s.Period.End(s.PeriodStart),
			Limit: s.EffectiveLimit, Spent: s.Spent, Held: s.Held, Remaining: max(0, s.EffectiveLimit-s.Spent-s.Held),
		})
	}
	slices.SortFunc(out.Budgets, func(a, b MeBudget) int {
		return strings.Compare(a.Kind+"\x00"+a.Name+"\x00"+a.Model, b.Kind+"\x00"+b.Name+"\x00"+b.Model)
	})

	// the models the key may use, and their pools
	var pools []*pool
	for _, m := range g.keyModels(k) {
		out.Models = append(out.Models, m.ID)
		if rt := g.routeOf(m.ID); rt != nil && !slices.Contains(pools, rt.pool) {
			pools = append(pools, rt.pool)
		}
	}
	chain := view.chainNames(org, k)
	path := fairshare.Path{Org: org, Team: k.Team, Project: k.Project, User: k.Owner}
	for _, pl := range g.poolOrder {
		if slices.Contains(pools, pl) {
			out.Share = append(out.Share, meShare(pl, path, chain, now))
		}
	}
	return out
}

// meShare is the standing of a key of path in pool pl; chain names the
// accounts of its chain (chainNames).
func meShare(pl *pool, path fairshare.Path, chain map[string]bool, now time.Time) MePool {
	s := pl.fs.Snapshot(now)
	mp := MePool{Pool: pl.name, Capacity: s.Capacity, InFlight: s.InFlight, Borrowing: s.Borrowing, Accounts: []MeAccount{}}
	leaf := ""
	for _, r := range s.Rows {
		if r.User || !onChain(r.Path, chain) {
			continue
		}
		mp.Accounts = append(mp.Accounts, meAccount(r))
		leaf = r.Name // rows are in pre-order: the deepest comes last
	}
	if path.User != "" {
		for _, r := range s.Rows {
			if r.User && r.Partition == "" && strings.EqualFold(r.Name, path.User) && len(r.Path) > 1 && r.Path[len(r.Path)-2] == leaf {
				mp.Accounts = append(mp.Accounts, meAccount(r))
				break
			}
		}
	}
	mp.Priority = MePriority{Interactive: pl.fs.Peek(path, 0), Batch: pl.fs.Peek(path, 1)}
	switch p := mp.Priority.Interactive; {
	case p >= fairshare.PriorityUnknown:
		mp.Standing = "unknown"
	case p >= fairshare.PriorityBorrowBase:
		mp.Standing = "borrowing"
	case p >= fairshare.PriorityBandBase:
		mp.Standing = "borrowing_sibling"
	default:
		mp.Standing = "within"
	}
	return mp
}

func meAccount(r fairshare.Row) MeAccount {
	return MeAccount{Account: r.Name, Kind: r.Kind, Reserved: r.Reserved, InFlight: r.InFlight, Within: r.WithinShare,
		Borrowing: r.Borrowing, RawShares: r.RawShares, RawUsage: r.RawUsage, LevelFS: r.LevelFS, FairShare: r.FairShare}
}

// onChain reports whether every account of a row's path is on the chain.
func onChain(path []string, chain map[string]bool) bool {
	for _, p := range path {
		if !chain[p] {
			return false
		}
	}
	return len(path) > 0
}

// chainNames are the accounts a key's requests count under in v: its
// organisation, team, and project with the projects above it.
func (v *accountView) chainNames(org string, k *llmflow.Key) map[string]bool {
	m := map[string]bool{org: true, k.Team: true}
	for a, i := v.byName[k.Project], 0; a != nil && a.Kind == llmflow.KindProject && i < 64; a, i = v.byName[a.Parent], i+1 {
		m[a.Name] = true
	}
	return m
}

// keyModels are the model cards k may use: its team's model list, then
// its own (an alias counts as its model).
func (g *Gateway) keyModels(k *llmflow.Key) []modelCard {
	cards := g.visibleModels(k.Team)
	if len(k.Models) == 0 {
		return cards
	}
	out := make([]modelCard, 0, len(cards))
	for _, m := range cards {
		if rt := g.routeOf(m.ID); rt != nil && k.AllowsModel(rt.name) {
			out = append(out, m)
		}
	}
	return out
}

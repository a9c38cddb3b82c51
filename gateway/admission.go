package gateway

import (
	"cmp"
	"context"
	"errors"
	"net/http"
	"time"

	"github.com/go-llmflow/llmflow"
	"github.com/go-llmflow/llmflow/admission"
	"github.com/go-llmflow/llmflow/engine"
	"github.com/go-llmflow/llmflow/fairshare"
)

// step is one admission step of a client request: before anything is sent
// upstream, it checks or takes something the request needs, or refuses
// it. Steps run in the order of Gateway.steps. release, when not nil,
// gives back what admit took; it runs exactly once for every step taken,
// in reverse order, both when a later step refuses the request and when
// the request ends (answered, failed upstream, or its client gone).
//
// Adding a step (a budget hold, a rate limit) is one more entry in
// admissionSteps with its own admit and release; no other step changes.
// What the steps take in the state shared with other replicas is one
// admission (admission.Shared): the steps before it fill in their part of
// x.adm (the budget step its budget request), the shared step admits it
// all or nothing and releases it.
type step struct {
	name    string
	admit   func(ctx context.Context, x *exchange) error
	release func(x *exchange) // nil: nothing to give back

	// reason is the llmflow_denied_total reason when admit refuses;
	// byCode overrides it for some error codes.
	reason string
	byCode map[string]string
}

// admissionSteps are the steps of every proxied request, in order.
func (g *Gateway) admissionSteps() []step {
	return []step{
		{name: "auth", admit: g.admitKey, reason: reasonAuth, byCode: authByCode},
		{name: "key_state", admit: g.admitKeyState, reason: reasonDisabled},
		{name: "accounting", admit: g.admitAccounting, reason: reasonAccounting}, // a record that could be kept nowhere
		{name: "request", admit: g.admitRequest, reason: reasonBadRequest,
			byCode: map[string]string{llmflow.ETOOLARGE: reasonTooLarge}},
		{name: "model", admit: g.admitModel, reason: reasonModel},
		{name: "tags", admit: g.admitTags, reason: reasonBadTags},
		// budgets and per-key limits: the request's budget request, taken
		// by the shared step
		{name: "budget", admit: g.admitBudget, reason: reasonBudget,
			byCode: map[string]string{llmflow.EINVALID: reasonBadRequest}}, // an output limit that cannot bound the engine
		{name: "queue", admit: g.admitQueue, release: g.releaseQueue, reason: reasonQueue},
		// the fair share and the budget request: one admission of the
		// pool's shared state (a budget's or key limit's refusal has its
		// own reason, budgetRefusal)
		{name: "shared", admit: g.admitShared, release: g.releaseShared, reason: reasonQueue, byCode: grpTRESByCode},
		// reclaim on engines that queue by priority themselves: a slot in
		// the pool's queue, taken from a borrower if need be (reclaim.go)
		{name: "slot", admit: g.admitSlot, release: g.releaseQueue, reason: reasonQueue},
	}
}

// authByCode are the denial reasons of a refused client key, by error
// code, other than reasonAuth: the auth step's and Gateway.authenticate's.
var authByCode = map[string]string{llmflow.ERATELIMIT: reasonAuthLimited}

// grpTRESByCode: the shared step's 429 is an account's GrpTRES cap.
var grpTRESByCode = map[string]string{llmflow.ERATELIMIT: reasonGrpTRES}

// deniedReason is the llmflow_denied_total reason of err: byCode's for
// err's code, else reason.
func deniedReason(err error, reason string, byCode map[string]string) string {
	var own interface{ deniedReason() string }
	if errors.As(err, &own) {
		return own.deniedReason()
	}
	if r, ok := byCode[llmflow.ErrorCode(err)]; ok {
		return r
	}
	return reason
}

// errClientGone is returned by admit when the client left while a step
// waited: there is nobody to answer.
var errClientGone = errors.New("client gone during admission")

// admit runs the admission steps for x. When one refuses, the steps taken
// are released, the refusal accounted (refused), and its error returned.
func (g *Gateway) admit(ctx context.Context, x *exchange) error {
	for i := range g.steps {
		s := &g.steps[i]
		if err := s.admit(ctx, x); err != nil {
			g.release(x)
			return g.refused(x, s, err)
		}
		x.taken = i + 1
	}
	return nil
}

// refused accounts for a request that step s refused with err, and
// returns the error to answer (errClientGone when the client left).
//
// Every refusal is counted in llmflow_denied_total by reason (client_gone
// when the client left while a step waited). A refusal with a known key
// (the auth step found it, even revoked) also leaves an accounting record
// against the key's team: outcome client_gone and status 499 when the
// client left, else outcome rejected and the status answered; no tokens,
// no GPU-hours; model and pool only when the model was routed. A refusal
// before a key is known (no key, a bad key, a throttled network) leaves
// the metric only, so nobody without a key can fill the store. Every
// refusal has its access log line.
func (g *Gateway) refused(x *exchange, s *step, err error) error {
	outcome, status, reason := llmflow.OutcomeRejected, statusOf(err), deniedReason(err, s.reason, s.byCode)
	if x.r.Context().Err() != nil {
		outcome, status, reason, err = llmflow.OutcomeClientGone, statusClientGone, reasonClientGone, errClientGone
	}
	g.m.denied.WithLabelValues(reason).Inc()
	rec := llmflow.Record{
		Time: x.start, RequestID: x.id,
		Status: status, Outcome: outcome,
		Latency: g.now().Sub(x.start),
	}
	if x.key != nil {
		rec.KeyID, rec.Project, rec.Team, rec.Org = x.key.ID, x.key.Project, x.key.Team, cmp.Or(x.org, x.key.Org)
		rec.Tags = x.requestTags()
	}
	if x.rt != nil {
		rec.Model, rec.Pool = x.rt.name, x.rt.pool.name
	}
	if x.rq != nil {
		rec.Stream = x.rq.stream
	}
	g.accessLog(&rec, x.r.RemoteAddr, reason)
	if x.key != nil && g.rec != nil {
		g.rec.Enqueue(rec)
	}
	return err
}

// release gives back, in reverse order, what the steps taken for x hold.
func (g *Gateway) release(x *exchange) {
	for i := x.taken - 1; i >= 0; i-- {
		if r := g.steps[i].release; r != nil {
			r(x)
		}
	}
	x.taken = 0
}

// admitKey authenticates the client key.
func (g *Gateway) admitKey(ctx context.Context, x *exchange) error {
	ck, err := g.auth.authenticate(ctx, x.r.Header.Get("Authorization"), g.clientAddr(x.r), x.start)
	if err != nil {
		if ke, ok := err.(*knownKeyError); ok {
			x.key = ke.key // refused, but accounted to its team
		}
		return err
	}
	x.key, x.ck = &ck.key, ck
	return nil
}

// admitKeyState refuses a key whose team, organisation or project is
// disabled in the tree served now, and places the key in that tree.
func (g *Gateway) admitKeyState(_ context.Context, x *exchange) error {
	x.view = g.accts.Load()
	x.org = x.view.orgOf(x.key)
	if x.view.disabled(x.key) {
		return llmflow.Errorf(llmflow.EFORBIDDEN, "the key's team %q (or its organisation or project) is disabled or no longer in the account tree", x.key.Team)
	}
	return nil
}

// admitRequest reads and checks the body.
func (g *Gateway) admitRequest(_ context.Context, x *exchange) error {
	body, err := readBody(x.r, g.cfg.Limits.MaxBodyBytes)
	if err != nil {
		return err
	}
	x.rq, err = parseRequest(body, x.ep)
	return err
}

// admitModel routes the request's model; a model the pool's engines do
// not serve on this endpoint, or that the key's team's model list hides,
// is as unknown as one that does not exist.
func (g *Gateway) admitModel(_ context.Context, x *exchange) error {
	rt := g.routeOf(x.rq.model) // a configured model or an alias (routing.go)
	if rt == nil || !rt.pool.engine.Serves(x.ep) || g.modelLists.Load().hidden(x.key.Team, rt) || !x.key.AllowsModel(rt.name) {
		e := llmflow.Errorf(llmflow.ENOTFOUND, "the model %q does not exist or you do not have access to it", x.rq.model)
		e.Param = "model"
		return e
	}
	x.rt = rt
	return nil
}

// admitQueue waits for a slot of the pool's gateway-side queue, when the
// pool's engines have no priority scheduler (scheduler = "gateway").
func (g *Gateway) admitQueue(ctx context.Context, x *exchange) error {
	pl := x.rt.pool
	if pl.queue == nil || pl.engine.Scheduling != engine.GatewayQueue {
		return nil
	}
	// A request its budgets or key limits already refuse, by this
	// gateway's figures (in Redis, what is held and spent is at least
	// that), is refused now rather than after waiting its turn; one that
	// gets a slot at once is decided by the shared step alone. One within
	// its organisation's reservation takes a slot back from a borrower.
	check := func(prio int) error {
		if r := x.adm.Budget; r != nil {
			if err := g.bud.mem.Check(x.start, r); err != nil {
				return g.budgetRefused(err)
			}
		}
		g.reclaimOnWait(x, prio)
		return nil
	}
	if err := pl.queue.acquireOr(ctx, x.queueKeyOf(), g.now, check, &x.arrival); err != nil {
		return err
	}
	x.queued = true
	return nil
}

// releaseQueue gives x's slot of its pool's queue back.
func (g *Gateway) releaseQueue(x *exchange) {
	if x.queued {
		x.rt.pool.queue.free(x.victim, x.top)
		x.queued, x.victim, x.top = false, false, false
	}
}

// admitShared takes the request's place in the state its pool's
// admissions share, in one call (admission.Shared): its fair-share place
// (and priority) and the budget request the budget step made, all or
// nothing. The request counts at its key's owner's user association in the
// key's account (project, else team) when the tree has one, else at the
// account itself.
func (g *Gateway) admitShared(ctx context.Context, x *exchange) error {
	pl := x.rt.pool
	seat := pl.fs.Locate(fairshare.Path{Org: x.org, Team: x.key.Team, Project: x.key.Project, User: x.key.Owner})
	x.adm.Chain = seat.Chain
	switch err := pl.shared.Admit(ctx, &x.adm); {
	case err == nil:
	case errors.Is(err, admission.ErrCapped):
		// Slurm's GrpTRES=gres/gpu=N on an account or a user association:
		// its requests in flight in this pool are capped
		// (fairshare.Node.GPULimit); nothing taken
		e := llmflow.Errorf(llmflow.ERATELIMIT, "%s has as many requests in flight in pool %s as its Slurm GPU limit (GrpTRES gres/gpu) allows; retry shortly",
			seat.Association(x.adm.Capped), quote(pl.name))
		return withRetryAfter(e, time.Second)
	default:
		return g.budgetRefused(err) // a budget or key limit: nothing taken
	}
	x.admitted = true
	x.priority = seat.Priority(x.adm.Placement, x.rt.class)
	if x.adm.Budget != nil {
		g.budgetReserved(x)
	}
	return nil
}

// releaseShared gives the request's place back, charges its cost (known
// by then: finish computes it first) to its fair-share usage and its
// budgets, and its tokens to its key's window.
func (g *Gateway) releaseShared(x *exchange) {
	if !x.admitted {
		return
	}
	x.admitted = false
	x.rt.pool.shared.Release(context.Background(), &x.adm, admission.End{At: g.endTime(x), GPUHours: x.rec.GPUHours,
		Tokens: x.rec.PromptTokens + x.rec.CompletionTokens})
}

// readBody reads the whole body, refusing more than limit bytes.
func readBody(r *http.Request, limit int64) ([]byte, error) {
	b, err := readAll(r.Body, r.ContentLength, limit)
	switch {
	case errors.Is(err, errTooLong):
		return nil, llmflow.Errorf(llmflow.ETOOLARGE, "request body larger than %d bytes", limit)
	case err != nil:
		return nil, &llmflow.Error{Code: llmflow.EINVALID, Message: "could not read the request body", Err: err}
	}
	return b, nil
}

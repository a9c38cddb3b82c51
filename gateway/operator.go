package gateway

import (
	"time"

	"github.com/go-llmflow/llmflow"
)

// secretKind is a set of operator secrets: the ones a route accepts, or
// the one a token matched.
type secretKind uint8

const (
	secretMaster  secretKind = 1 << iota // the master key: admin routes, /healthz details
	secretMetrics                        // the metrics token: /metrics, /healthz details
)

// operatorAuth checks the operator secrets: the master key and the
// metrics token. Admin tokens (llma-…, delegated administration) plug in
// here, looked up after the constant-time comparisons and under the same
// limiter.
//
// Operator secrets have their own per-network failure limiter, separate
// from the client keys' one, so the two never throttle each other:
//
//   - bad client keys from a network (a NAT'd campus where one machine
//     sprays keys) throttle client keys only; the administrators behind
//     that network keep the admin API;
//   - bad operator secrets from a network (a wrong master key, a wrong
//     metrics token, a wrong token on /healthz) throttle the operator
//     routes of that network only, the master key included, so a guess
//     learns nothing from a throttled answer.
//
// The metrics token shares the master key's bucket rather than having one
// of its own: both are operator secrets guessed by the same kind of
// attacker, and a second bucket would double the guesses allowed. A
// scraper with a stale token (one failure per scrape) never drains it.
type operatorAuth struct {
	master  *secretMatcher // nil: no master key configured
	metrics *secretMatcher // nil: /metrics is open
	limiter *failureLimiter
}

// match returns the operator secrets tok matches. Every configured secret
// is compared, in constant time, whatever the first comparison gave.
func (o *operatorAuth) match(tok string) secretKind {
	var k secretKind
	if o.master.match(tok) {
		k |= secretMaster
	}
	if o.metrics.match(tok) {
		k |= secretMetrics
	}
	return k
}

// check authenticates an Authorization header value for a route that
// accepts the secrets in accept. A network past its operator failure limit
// is answered errTooManyBad (with Retry-After) before any comparison; a
// token that matches none of accept counts as one failure and returns
// refused. The returned kind is the accepted secret the token matched.
func (o *operatorAuth) check(header, remoteAddr string, now time.Time, accept secretKind, refused error) (secretKind, error) {
	net := clientNetwork(remoteAddr)
	if blocked, after := o.limiter.blocked(net, now); blocked {
		return 0, withRetryAfter(errTooManyBad, after)
	}
	tok, _ := bearer(header)
	if k := o.match(tok) & accept; k != 0 && tok != "" {
		return k, nil
	}
	o.limiter.fail(net, now)
	return 0, refused
}

// errOperatorAuth refuses an operator secret on /healthz (counted, not
// answered: /healthz then shows the summary).
var errOperatorAuth = &llmflow.Error{Code: llmflow.EUNAUTHORIZED, Message: "admin routes need Authorization: Bearer <master key or admin token llma-…>"}

// operatorDenied counts an operator authentication failure in
// llmflow_denied_total.
func (g *Gateway) operatorDenied(err error) {
	reason := reasonAdminAuth
	if llmflow.ErrorCode(err) == llmflow.ERATELIMIT {
		reason = reasonAdminAuthLimited
	}
	g.m.denied.WithLabelValues(reason).Inc()
}

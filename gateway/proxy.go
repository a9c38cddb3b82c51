package gateway

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/go-llmflow/llmflow"
	"github.com/go-llmflow/llmflow/admission"
	"github.com/go-llmflow/llmflow/engine"
	"github.com/go-llmflow/llmflow/fairshare"
	"github.com/go-llmflow/llmflow/internal/jsonscan"
	"github.com/go-llmflow/llmflow/sse"
)

var (
	hdrJSON  = []string{"application/json"}
	prioHdrs = func() (h [128][]string) {
		for i := range h {
			h[i] = []string{strconv.Itoa(i)}
		}
		return h
	}()
)

// statusClientGone is recorded when the client left (nginx's 499).
const statusClientGone = 499

// exchange is one client request on its way through the gateway.
type exchange struct {
	id    string
	start time.Time
	end   time.Time // set by finish
	r     *http.Request
	ep    engine.Endpoint
	taken int // admission steps taken (Gateway.steps[:taken] to release)
	key   *llmflow.Key
	rt    *route
	rq    *clientRequest
	view  *accountView
	org   string // the key's team's organisation in the tree served now
	// adm is the request's admission of its pool's shared state: the
	// budget step's request and the shared step's place (admission.go);
	// admitted while it holds them.
	adm      admission.Admission
	admitted bool
	priority int  // the fair-share priority sent to the engine (or the queue's order)
	queued   bool // holds a slot of the pool's gateway-side queue
	up       *upstream
	tried    *upstream // the last upstream the request was sent to
	sentUp   time.Time // first upstream attempt
	upDone   time.Time // upstream answer read
	first    time.Time // first byte to the client
	// cancelUp cancels the upstream request of a stream watched for
	// idleness (limits.stream_idle_timeout); nil otherwise.
	cancelUp context.CancelFunc
	rec      llmflow.Record
	// recorded: rec was completed and queued when the stream's [DONE]
	// arrived (recordAtDone); finish leaves it as it is.
	recorded bool
	// tail is the last byte of a whole answer, written after finish
	// (writeAnswer)
	tail []byte

	ck  *cachedKey // the key's cache entry (nil for a refused key)
	bud budgetReq  // budgets and per-key limits (budgets.go)
	// outputLimit, when > 0, is the output limit sent upstream in place
	// of the client's: what the request's budgets hold for it.
	outputLimit int64

	// Reclaim (reclaim.go, resume.go). arrival is the request's order in
	// its pool's queue; resume: whether the gateway can resume its answer
	// (resumeUnknown until a step asks, x.resumable);
	// picked: reclaim picked it as a victim (set under the reclaimer's
	// lock, read by its relay); victim: its queue slot was counted as
	// coming back when it is released; top: its slot was taken at once,
	// within its organisation's reservation (queue.takeReclaiming);
	// preempt cancels its current engine attempt with a cause.
	arrival uint64
	resume  resumability
	picked  atomic.Bool
	victim  bool
	top     bool
	preempt context.CancelCauseFunc
}

// inference returns the handler of one proxied OpenAI route: admission
// (Gateway.steps), the upstream exchange, then finish, which releases
// what admission took.
func (g *Gateway) inference(ep engine.Endpoint) handler {
	return func(w http.ResponseWriter, r *http.Request) error {
		x := &exchange{start: g.now(), r: r, ep: ep, id: g.requestID()}
		w.Header().Set("X-Request-Id", x.id)
		ctx, cancel := context.WithTimeout(r.Context(), g.cfg.Limits.MaxRequestDuration)
		defer cancel()
		if err := g.admit(ctx, x); err != nil {
			if err == errClientGone {
				return nil // the client left while waiting: nothing to answer
			}
			return err
		}
		g.setBudgetHeaders(w, x)
		err := g.forward(ctx, w, x)
		g.finish(x)
		if x.tail != nil {
			w.Write(x.tail) // the answer's last byte (writeAnswer), now the request is released
		}
		return err
	}
}

var errTooLong = errors.New("body over the size limit")

// readAll reads a body of announced length n (-1 = unknown) up to limit
// bytes: into an exact buffer when n is known, growing otherwise.
func readAll(r io.Reader, n, limit int64) ([]byte, error) {
	if n > limit {
		return nil, errTooLong
	}
	if n >= 0 {
		b := make([]byte, n)
		if _, err := io.ReadFull(r, b); err != nil {
			return nil, err
		}
		var one [1]byte
		if m, _ := r.Read(one[:]); m > 0 {
			return nil, errors.New("body longer than its Content-Length")
		}
		return b, nil
	}
	buf := bytes.NewBuffer(make([]byte, 0, 4096))
	m, err := buf.ReadFrom(io.LimitReader(r, limit+1))
	if err != nil {
		return nil, err
	}
	if m > limit {
		return nil, errTooLong
	}
	return buf.Bytes(), nil
}

// forward sends the request upstream (retrying before the first byte) and
// relays the answer. It fills x.rec's outcome, status and usage.
func (g *Gateway) forward(ctx context.Context, w http.ResponseWriter, x *exchange) error {
	if x.priority >= fairshare.PriorityBandBase && x.resumable() {
		return g.forwardResumable(ctx, w, x) // a borrower reclaim may preempt
	}
	rt, pl := x.rt, x.rt.pool
	// A stream's engine reports its running usage in every chunk where it
	// can: a client that leaves is charged what the engine did (the chunks
	// reach the client without it unless it asked).
	ub := upstreamBody{engine: &pl.engine, model: rt.upstreamModel, cacheSalt: x.view.salts[x.org], outputLimit: x.outputLimit,
		continuous: x.rq.stream && pl.engine.ContinuousUsage}
	if pl.engine.PriorityBody {
		ub.priority, ub.withPrio = pl.engine.Wire(x.priority), true
	}
	body := x.rq.encode(ub)
	if x.rq.stream && g.cfg.Limits.StreamIdleTimeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithCancel(ctx)
		defer cancel()
		x.cancelUp = cancel
	}

	resp, err := g.roundTrip(ctx, x, body)
	if err != nil {
		x.rec.Outcome = llmflow.OutcomeUnreachable
		if x.r.Context().Err() != nil {
			x.rec.Outcome = llmflow.OutcomeClientGone
			x.rec.Status = statusClientGone
			g.estimate(x, 0, llmflow.EstimateClientGone)
			g.countedPrompt(x) // it may have been prefilled; what was generated is unknown
			return nil
		}
		x.rec.Status = statusOf(err)
		return err
	}
	defer resp.Body.Close()

	switch {
	case resp.StatusCode == http.StatusOK && x.rq.stream && isEventStream(resp.Header):
		return g.relayStream(w, x, resp)
	case resp.StatusCode == http.StatusOK:
		return g.relayBody(w, x, resp)
	default:
		return g.relayError(x, resp)
	}
}

func isEventStream(h http.Header) bool {
	ct := h.Get("Content-Type")
	return len(ct) >= 17 && ct[:17] == "text/event-stream"
}

// roundTrip sends body to the least-loaded healthy upstream of x's route,
// trying others on connection errors and on 502/503/504 answers, as long
// as nothing has reached the client. Redirects are answers like any other:
// they are never followed.
func (g *Gateway) roundTrip(ctx context.Context, x *exchange, body []byte) (*http.Response, error) {
	rt, pl := x.rt, x.rt.pool
	var tried []*upstream
	var lastErr error
	for attempt := 0; attempt <= g.cfg.Limits.Retries; attempt++ {
		now := g.now()
		up := rt.pick(now, tried)
		if up == nil {
			break
		}
		if attempt > 0 {
			g.m.retries.WithLabelValues(pl.name, up.name).Inc()
		}
		tried = append(tried, up)
		h := make(http.Header, 5)
		h["Content-Type"] = hdrJSON
		h["Accept"] = hdrJSON
		if x.rq.stream {
			h["Accept"] = []string{"text/event-stream"}
		}
		h["User-Agent"] = g.userAgent
		if up.authHdr != nil {
			h["Authorization"] = up.authHdr
		}
		if pl.engine.PriorityHeader != "" {
			h[pl.engine.PriorityHeader] = priorityHeader(pl.engine.Wire(x.priority))
		}
		req := newUpstreamRequest(ctx, up.urls[x.ep], h, body)
		if x.sentUp.IsZero() {
			x.sentUp = now
		}
		up.b.inflight.Add(1)
		x.tried = up
		resp, err := pl.transport.RoundTrip(req)
		if err == nil {
			switch resp.StatusCode {
			case http.StatusBadGateway, http.StatusServiceUnavailable, http.StatusGatewayTimeout:
				if attempt < g.cfg.Limits.Retries && len(tried) < len(rt.upstreams()) {
					drain(resp)
					up.b.inflight.Add(-1)
					lastErr = llmflow.Errorf(llmflow.EUPSTREAM, "upstream answered %d", resp.StatusCode)
					continue
				}
			}
			x.up = up
			x.rec.Upstream = up.name
			return resp, nil
		}
		up.b.inflight.Add(-1)
		if ctx.Err() != nil {
			if errors.Is(ctx.Err(), context.DeadlineExceeded) {
				return nil, &llmflow.Error{Code: llmflow.ETIMEOUT, Message: "the request exceeded the gateway's maximum duration", Err: err}
			}
			return nil, ctx.Err()
		}
		if !isConnError(err) {
			return nil, &llmflow.Error{Code: llmflow.ETIMEOUT, Message: "the upstream did not answer in time", Err: err}
		}
		up.b.markDown(g.now(), g.cfg.Health.Cooldown)
		g.log.Warn("upstream unreachable", "request_id", x.id, "pool", pl.name, "upstream", up.name, "err", err)
		lastErr = &llmflow.Error{Code: llmflow.EUPSTREAM, Message: "the upstream could not be reached", Err: err}
	}
	if lastErr == nil {
		g.m.denied.WithLabelValues(reasonNoUpstream).Inc()
		return nil, withRetryAfter(llmflow.Errorf(llmflow.EUNAVAILABLE, "no healthy upstream for model %q", rt.name), g.cfg.Health.Cooldown)
	}
	return nil, lastErr
}

// newUpstreamRequest builds a POST of body to u without parsing u again.
func newUpstreamRequest(ctx context.Context, u *url.URL, h http.Header, body []byte) *http.Request {
	req := &http.Request{
		Method:        http.MethodPost,
		URL:           u,
		Proto:         "HTTP/1.1",
		ProtoMajor:    1,
		ProtoMinor:    1,
		Header:        h,
		Host:          u.Host,
		ContentLength: int64(len(body)),
		Body:          io.NopCloser(bytes.NewReader(body)),
		GetBody: func() (io.ReadCloser, error) {
			return io.NopCloser(bytes.NewReader(body)), nil
		},
	}
	return req.WithContext(ctx)
}

func priorityHeader(p int) []string {
	if p >= 0 && p < len(prioHdrs) {
		return prioHdrs[p]
	}
	return []string{strconv.Itoa(p)}
}

func drain(resp *http.Response) {
	io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	resp.Body.Close()
}

// flushWriter records the time of the first byte sent to the client,
// flushes for sse.Copy (before it waits for the engine), and records the
// request when the upstream's [DONE] arrives, before it is written
// (sse.DoneHook).
type flushWriter struct {
	w    http.ResponseWriter
	rc   *http.ResponseController
	x    *exchange
	g    *Gateway
	idle *idleReader // nil without limits.stream_idle_timeout
}

func (f *flushWriter) Write(p []byte) (int, error) {
	if f.x.first.IsZero() {
		f.x.first = f.g.now()
	}
	return f.w.Write(p)
}

func (f *flushWriter) Flush() error { return f.rc.Flush() }

// BeforeDone implements sse.DoneHook.
func (f *flushWriter) BeforeDone(res sse.Result) { f.g.recordAtDone(f.x, res, f.idle) }

// recordAtDone completes the record of a stream whose upstream sent
// [DONE] and queues it (the accounting spool appends it before Enqueue
// returns) before [DONE] is written: a client that saw the stream complete
// was accounted, even if the gateway is killed right after. Everything the
// record holds is known then: the usage came before [DONE], the outcome is
// ok, the latency ends at [DONE]. A client still connected at that moment
// was served in full (it has every chunk; only [DONE] remains), as one
// that leaves once it has [DONE]; one already gone (its request context
// ended) is left to relayStream and finish, which record it as before,
// client_gone when the write of [DONE] fails.
func (g *Gateway) recordAtDone(x *exchange, res sse.Result, idle *idleReader) {
	if g.rec == nil || x.r.Context().Err() != nil {
		return
	}
	now := g.now()
	if x.first.IsZero() {
		x.first = now // [DONE] is the first byte the client gets
	}
	g.streamOutcome(x, res, nil, idle)
	g.completeRecord(x, now)
	g.rec.Enqueue(x.rec)
	x.recorded = true
}

// relayStream forwards an SSE answer event by event. With
// limits.stream_idle_timeout set, an engine that sends nothing for that
// long has its request cancelled (x.cancelUp): the client's stream ends
// without [DONE] and the record is incomplete. The record of a stream
// that ends on [DONE] is queued before [DONE] is written (recordAtDone),
// and [DONE] is flushed by the handler's return, after finish.
func (g *Gateway) relayStream(w http.ResponseWriter, x *exchange, resp *http.Response) error {
	h := w.Header()
	h["Content-Type"] = []string{"text/event-stream"}
	h["Cache-Control"] = []string{"no-cache"}
	h["X-Accel-Buffering"] = []string{"no"}
	w.WriteHeader(http.StatusOK)
	fw := &flushWriter{w: w, rc: http.NewResponseController(w), x: x, g: g}
	var src io.Reader = resp.Body
	if x.cancelUp != nil {
		fw.idle = newIdleReader(resp.Body, g.cfg.Limits.StreamIdleTimeout, x.cancelUp)
		defer fw.idle.stop()
		src = fw.idle
	}
	opt := sse.Options{
		KeepUsage:      x.rq.wantsUsage,
		DropChunkUsage: x.rt.pool.engine.ContinuousUsage && !x.rq.continuousOK,
		Flush:          fw.Flush,
		// [DONE] leaves with the answer's last chunk once finish has
		// released the request: a client that saw its stream end is no
		// longer in flight (max_inflight), and the end costs no write
		LeaveEnd:      true,
		Model:         x.rq.model,
		UpstreamModel: x.rt.upstreamModel,
		Responses:     x.rq.responses,
		// an error event's text is scrubbed as an error answer's is
		ScrubError: func(data []byte) []byte { return scrubberFor(x).json(data) },
		// an engine generating past its output limit is cut
		MaxDeltas: x.maxDeltas(),
	}
	if fw.idle != nil {
		opt.OnEvent = fw.idle.event
	}
	res, err := sse.Copy(fw, src, opt)
	x.upDone = g.now()
	if err == sse.ErrTooManyDeltas {
		g.cutStream(fw, x)
	}
	if !x.recorded { // else recorded at [DONE], final
		g.streamOutcome(x, res, err, fw.idle)
	}
	return nil
}

// streamOutcome sets the outcome, status and usage of a stream that Copy
// forwarded, with Copy's result and error.
func (g *Gateway) streamOutcome(x *exchange, res sse.Result, err error, idle *idleReader) {
	x.rec.Status = http.StatusOK
	var we *sse.WriteError
	reason := llmflow.EstimateNoUsage
	switch {
	case err == sse.ErrTooManyDeltas:
		x.rec.Outcome = llmflow.OutcomeUpstreamError
		reason = llmflow.EstimateInvalidUsage
	case errors.As(err, &we) || (x.r.Context().Err() != nil && !res.Done):
		// A client that leaves once it has [DONE] (the OpenAI SDKs close
		// at once) was served in full: only a failed write, or a departure
		// before the end, is client_gone. Closing the upstream body
		// (deferred) aborts the request in the engine at once.
		x.rec.Outcome = llmflow.OutcomeClientGone
		x.rec.Status = statusClientGone
		reason = llmflow.EstimateClientGone
	case idle != nil && idle.fired.Load():
		x.rec.Outcome = llmflow.OutcomeIncomplete
		reason = llmflow.EstimateIdleTimeout
		g.log.Warn("upstream stream idle: request cancelled", "request_id", x.id, "upstream", x.up.name,
			"idle", g.cfg.Limits.StreamIdleTimeout)
	case res.ErrorEvent:
		x.rec.Outcome = llmflow.OutcomeUpstreamError
		reason = llmflow.EstimateUpstreamError
	case err != nil || !res.Done:
		x.rec.Outcome = llmflow.OutcomeIncomplete
		reason = llmflow.EstimateIncomplete
		if err != nil {
			g.log.Warn("upstream stream broke", "request_id", x.id, "upstream", x.up.name, "err", err)
		}
	default:
		x.rec.Outcome = llmflow.OutcomeOK
	}
	switch {
	case res.HasUsage && (res.Done || !(x.rq.continuousOK || x.rt.pool.engine.ContinuousUsage)):
		g.takeUsage(x, res.Usage, int64(res.Deltas)) // the final usage chunk came
	case res.HasUsage:
		// the engine's running count (continuous usage stats) of an
		// interrupted stream: what it did up to the last chunk read, not an
		// estimate (within what the gateway let it do: takeUsage)
		g.takeUsage(x, res.Usage, int64(res.Deltas))
	default:
		g.estimate(x, int64(res.Deltas), reason)
		if reason != llmflow.EstimateUpstreamError && reason != llmflow.EstimateNoUsage {
			g.countedPrompt(x) // the engine counts the prompt, the chunks forwarded the rest
		}
	}
}

// idleReader reads a stream's upstream body and cancels the upstream
// request when no whole event arrives for d: an engine dripping a byte now
// and then without ever completing an event is idle all the same. The timer
// runs from the first read after an event until the next event completes
// (event, which Copy calls through sse.Options.OnEvent before it writes),
// so time spent writing to a slow client is not idle time. One timer per
// stream, no allocation per event.
type idleReader struct {
	r     io.Reader
	d     time.Duration
	t     *time.Timer
	armed bool        // the timer runs: waiting for an event
	fired atomic.Bool // the timer went off: the request was cancelled
}

func newIdleReader(r io.Reader, d time.Duration, cancel context.CancelFunc) *idleReader {
	ir := &idleReader{r: r, d: d}
	ir.t = time.AfterFunc(d, func() {
		ir.fired.Store(true)
		cancel()
	})
	ir.t.Stop()
	return ir
}

func (ir *idleReader) Read(p []byte) (int, error) {
	if !ir.armed {
		ir.t.Reset(ir.d)
		ir.armed = true
	}
	return ir.r.Read(p)
}

// WaitReadable waits for the engine's next bytes without a buffer, when
// the body can (internal/h1's; sse.Reader asks): the wait is idle time,
// as a read is.
func (ir *idleReader) WaitReadable() error {
	w, ok := ir.r.(interface{ WaitReadable() error })
	if !ok {
		return nil
	}
	if !ir.armed {
		ir.t.Reset(ir.d)
		ir.armed = true
	}
	return w.WaitReadable()
}

// event stops the timer: a whole event arrived.
func (ir *idleReader) event() {
	ir.t.Stop()
	ir.armed = false
}

func (ir *idleReader) stop() { ir.t.Stop() }

// validUsage reports whether usage the engine reported can be believed:
// well-formed integers, none negative, cached ≤ prompt, and no more than
// the gateway let it use (usage_bounds.go): prompt tokens within the
// prompt's bound, completion tokens within the output limit of each
// sequence.
func (x *exchange) validUsage(u sse.Usage) bool {
	return !u.Malformed &&
		u.PromptTokens >= 0 && u.PromptTokens <= x.promptBound() &&
		u.CompletionTokens >= 0 && u.CompletionTokens <= x.completionBound() &&
		u.CachedTokens >= 0 && u.CachedTokens <= u.PromptTokens
}

// logInvalidUsage says which engine reported usage that validUsage refused.
func (g *Gateway) logInvalidUsage(x *exchange, u sse.Usage) {
	g.log.Warn("engine usage not believed: estimated", "request_id", x.id, "upstream", x.up.name,
		"prompt", u.PromptTokens, "completion", u.CompletionTokens, "cached", u.CachedTokens, "malformed", u.Malformed)
}

// setUsage takes the engine's usage, which validUsage accepted.
func (x *exchange) setUsage(u sse.Usage) {
	x.rec.PromptTokens, x.rec.CompletionTokens, x.rec.CachedTokens = u.PromptTokens, u.CompletionTokens, u.CachedTokens
}

// estimate charges prompt bytes / 4 and the completion estimate (the
// content deltas already forwarded, or a whole answer's bytes / 4), at
// most what the engine may have generated, and flags the record with why.
func (g *Gateway) estimate(x *exchange, completion int64, why llmflow.EstimateReason) {
	if x.rq == nil {
		return
	}
	x.rec.PromptTokens = x.promptEstimate()
	x.rec.CompletionTokens = min(completion, x.completionBound())
	x.rec.CachedTokens = 0
	x.rec.Estimated = true
	x.rec.EstimateReason = why
}

// relayBody forwards a complete JSON answer, capped in size.
func (g *Gateway) relayBody(w http.ResponseWriter, x *exchange, resp *http.Response) error {
	limit := g.cfg.Limits.MaxResponseBytes
	b, err := readAll(resp.Body, resp.ContentLength, limit)
	x.upDone = g.now()
	if err != nil && !errors.Is(err, errTooLong) {
		if x.r.Context().Err() != nil {
			x.rec.Outcome, x.rec.Status = llmflow.OutcomeClientGone, statusClientGone
			g.estimate(x, 0, llmflow.EstimateClientGone)
			g.countedPrompt(x) // the prompt was prefilled; what was generated is unknown
			return nil
		}
		x.rec.Outcome = llmflow.OutcomeIncomplete
		g.estimate(x, 0, llmflow.EstimateIncomplete)
		e := &llmflow.Error{Code: llmflow.EUPSTREAM, Message: "the upstream answer broke off", Err: err}
		x.rec.Status = statusOf(e)
		return e
	}
	if err != nil {
		x.rec.Outcome = llmflow.OutcomeUpstreamError
		g.estimate(x, 0, llmflow.EstimateUpstreamError)
		e := llmflow.Errorf(llmflow.EUPSTREAM, "the upstream answer is larger than %d bytes", limit)
		x.rec.Status = statusOf(e)
		return e
	}
	// The answer goes to the client as the engine sent it, whatever its
	// usage; the completion, when not believed, is estimated by its size.
	if u, ok := answerUsage(x.ep, b); ok {
		g.takeUsage(x, u, bodyTokens(b))
	} else {
		g.estimate(x, bodyTokens(b), llmflow.EstimateNoUsage)
	}
	x.rec.Outcome, x.rec.Status = llmflow.OutcomeOK, http.StatusOK
	if x.rq.model != x.rt.upstreamModel {
		b = renameModel(b, x.rq.model)
	}
	g.writeAnswer(w, x, b)
	return nil
}

// writeAnswer sends the whole answer b (status 200), all but its last
// byte, which the handler writes after finish (x.tail): a client never
// has a complete answer before the request is released (a client with
// max_inflight = 1 that sends its next request at once, on another
// connection, is not refused for this one) and queued for accounting. A
// large answer leaves the server's buffer as it is written; its last
// byte stays. A failed write is the client's going.
func (g *Gateway) writeAnswer(w http.ResponseWriter, x *exchange, b []byte) {
	h := w.Header()
	h["Content-Type"] = hdrJSON
	h["Content-Length"] = []string{strconv.Itoa(len(b))}
	w.WriteHeader(http.StatusOK)
	x.first = g.now()
	if len(b) == 0 {
		return
	}
	if _, err := w.Write(b[:len(b)-1]); err != nil {
		x.rec.Outcome, x.rec.Status = llmflow.OutcomeClientGone, statusClientGone
		return
	}
	x.tail = b[len(b)-1:]
}

// renameModel returns the JSON answer b with the string value of its
// top-level "model" member replaced by name, the model the client asked
// for (clients reuse response.model); b itself when there is none.
func renameModel(b []byte, name string) []byte {
	s, e, ok := jsonscan.Member(b, "model")
	if !ok || b[s] != '"' {
		return b
	}
	out := make([]byte, 0, len(b)+len(name)+8)
	out = append(out, b[:s]...)
	out = appendJSONString(out, name)
	return append(out, b[e:]...)
}

// relayError turns an upstream error answer into the gateway's own: the
// engine's message for request errors the client can fix, a generic one
// for everything else (which may reveal engine internals). Whatever of the
// engine's text goes on, to the client or to the log, is scrubbed first
// (scrubber: the engine key, the cache_salt and the gateway's priority
// removed, the upstream model name replaced by the client's).
func (g *Gateway) relayError(x *exchange, resp *http.Response) error {
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	x.upDone = g.now()
	x.rec.Outcome = llmflow.OutcomeUpstreamError
	scrub := scrubberFor(x)
	var e *llmflow.Error
	switch resp.StatusCode {
	case http.StatusBadRequest, http.StatusUnprocessableEntity:
		e = llmflow.Errorf(llmflow.EINVALID, "%s", upstreamMessage(b, scrub))
	case http.StatusRequestEntityTooLarge:
		e = llmflow.Errorf(llmflow.ETOOLARGE, "%s", upstreamMessage(b, scrub))
	case http.StatusTooManyRequests:
		e = llmflow.Errorf(llmflow.ERATELIMIT, "the engine is overloaded; retry later")
	default:
		if resp.StatusCode >= 300 && resp.StatusCode < 400 {
			e = &llmflow.Error{Code: llmflow.EUPSTREAM, Message: "the upstream answered with a redirect, which is not followed",
				Err: errors.New("redirect status " + strconv.Itoa(resp.StatusCode))}
			break
		}
		e = &llmflow.Error{Code: llmflow.EUPSTREAM, Message: "the upstream failed",
			Err: errors.New("status " + strconv.Itoa(resp.StatusCode) + ": " + truncate(scrub.String(string(b)), 256))}
	}
	x.rec.Status = statusOf(e)
	return e
}

// upstreamMessage takes the message out of an engine error body, scrubbed
// by scrub and then cut to 1 KiB. It understands OpenAI's and newer vLLM's
// {"error":{"message":…}}, llama-server's and others' {"error":"…"},
// older vLLM's {"object":"error","message":…,"type":…,"code":400} and
// FastAPI's {"detail":"…"}; anything else gets a generic message.
func upstreamMessage(b []byte, scrub *scrubber) string {
	var body struct {
		Error   json.RawMessage `json:"error"`
		Message json.RawMessage `json:"message"`
		Detail  json.RawMessage `json:"detail"`
	}
	msg := "the engine refused the request"
	if json.Unmarshal(b, &body) != nil {
		return msg
	}
	var obj struct {
		Message string `json:"message"`
	}
	var s string
	switch {
	case len(body.Error) > 0 && json.Unmarshal(body.Error, &obj) == nil && obj.Message != "":
		msg = obj.Message
	case len(body.Error) > 0 && json.Unmarshal(body.Error, &s) == nil && s != "":
		msg = s
	case len(body.Message) > 0 && json.Unmarshal(body.Message, &s) == nil && s != "":
		msg = s
	case len(body.Detail) > 0 && json.Unmarshal(body.Detail, &s) == nil && s != "":
		msg = s
	default:
		return msg
	}
	return truncate(scrub.String(msg), 1024)
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}

// finish completes x's record, releases what admission took (charging the
// request's cost), settles the metrics, and queues the record (a stream
// recorded at its [DONE] is left as it was queued then). It runs once per
// admitted request, whatever happened.
func (g *Gateway) finish(x *exchange) {
	end := g.now()
	x.end = end
	if x.up != nil {
		x.up.b.inflight.Add(-1)
	}
	rec := &x.rec
	if !x.recorded {
		g.completeRecord(x, end)
	}
	g.release(x)

	c := g.m.child(rec.Model, rec.Pool, rec.Org, rec.Team)
	c.request(g.m, rec.Status)
	c.prompt.Add(float64(rec.PromptTokens))
	c.completion.Add(float64(rec.CompletionTokens))
	c.cached.Add(float64(rec.CachedTokens))
	c.gpu.Add(rec.GPUHours)
	if rec.Estimated {
		g.m.estimated.WithLabelValues(rec.Model, rec.Pool).Inc()
	}
	if !x.sentUp.IsZero() {
		upEnd := x.upDone
		if upEnd.IsZero() {
			upEnd = end
		}
		x.rt.pool.upstreamSeconds.Observe(upEnd.Sub(x.sentUp).Seconds())
		g.m.overhead.Observe((x.sentUp.Sub(x.start) + end.Sub(upEnd)).Seconds())
	}
	if g.rec != nil && !x.recorded {
		g.rec.Enqueue(*rec)
	}
	g.accessLog(rec, x.r.RemoteAddr, "")
}

// completeRecord fills in x's record, the request ending at end (the
// outcome, status and usage are set by then).
func (g *Gateway) completeRecord(x *exchange, end time.Time) {
	rec := &x.rec
	rec.Time = x.start
	rec.RequestID = x.id
	rec.KeyID, rec.Project, rec.Team, rec.Org = x.key.ID, x.key.Project, x.key.Team, x.org
	rec.Model, rec.Pool = x.rt.name, x.rt.pool.name
	rec.Tags = x.requestTags()
	rec.Stream = x.rq.stream
	if x.rt.pool.engine.SendsPriority() || x.queued {
		rec.Priority = x.priority // sent to the engine, or the queue's order
	}
	rec.Latency = end.Sub(x.start)
	if !x.first.IsZero() {
		rec.TTFB = x.first.Sub(x.start)
	}
	rec.GPUHours = x.rt.cost.GPUHours(rec.PromptTokens, rec.CompletionTokens, rec.CachedTokens)
}

// accessLog writes the access log line of one request, served or refused
// (denied is then the llmflow_denied_total reason), at info level: what
// was asked by whom and from which address (client, the connection's
// RemoteAddr), where it went, how it ended and what it cost; never a
// prompt, an answer or a secret. It is one slog call with typed
// attributes, so a disabled level costs one Enabled check and an enabled
// one boxes nothing.
func (g *Gateway) accessLog(rec *llmflow.Record, client, denied string) {
	ctx := context.Background()
	if !g.log.Enabled(ctx, slog.LevelInfo) {
		return
	}
	attrs := [...]slog.Attr{
		slog.String("request_id", rec.RequestID),
		slog.String("client", clientHost(client)),
		slog.String("key_id", rec.KeyID),
		slog.String("org", rec.Org),
		slog.String("team", rec.Team),
		slog.String("project", rec.Project),
		slog.String("model", rec.Model),
		slog.String("upstream", rec.Upstream),
		slog.Int("status", rec.Status),
		slog.String("outcome", string(rec.Outcome)),
		slog.Bool("stream", rec.Stream),
		slog.Int64("prompt_tokens", rec.PromptTokens),
		slog.Int64("completion_tokens", rec.CompletionTokens),
		slog.Int64("cached_tokens", rec.CachedTokens),
		slog.Bool("estimated", rec.Estimated),
		slog.String("estimate_reason", string(rec.EstimateReason)),
		slog.Float64("gpu_hours", rec.GPUHours),
		slog.Duration("latency", rec.Latency),
		slog.Duration("ttfb", rec.TTFB),
		slog.String("denied", denied),
	}
	n := len(attrs)
	if denied == "" {
		n-- // served: no denial reason
	}
	g.log.LogAttrs(ctx, slog.LevelInfo, "request", attrs[:n]...)
}

// writeJSON writes v with status.
func writeJSON(w http.ResponseWriter, status int, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return &llmflow.Error{Code: llmflow.EINTERNAL, Message: "internal error", Err: err}
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	w.Write(append(b, '\n'))
	return nil
}

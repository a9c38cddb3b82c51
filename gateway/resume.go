package gateway

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strconv"

	"github.com/go-llmflow/llmflow"
	"github.com/go-llmflow/llmflow/engine"
	"github.com/go-llmflow/llmflow/internal/jsonscan"
	"github.com/go-llmflow/llmflow/sse"
)

// A borrower the gateway may preempt (reclaim.go) is relayed here rather
// than by relayStream and relayBody: its answer is streamed from the engine
// whatever the client asked (to know what was generated when it is cut),
// and every chunk is looked at. When its slot is taken back it waits in
// the pool's queue and is sent again with the text so far as the final
// assistant message to continue (chat: continue_final_message with
// add_generation_prompt false) or after its prompt (completions), the same
// sampling parameters and its output limit lowered by what was generated.
// The client's stream only pauses: every chunk has the first attempt's id,
// created and the model it asked for; the resumed attempt's role chunk is
// dropped; the usage at the end counts the prompt once and every
// completion token. A client that did not stream gets one answer built
// from the chunks.

// attemptEnd is how one engine attempt of a resumable request ended.
type attemptEnd uint8

const (
	attemptDone        attemptEnd = iota // [DONE]
	attemptPreempted                     // its slot was taken back: resume
	attemptBroken                        // the stream broke off (or was idle)
	attemptClientGone                    // writing to the client failed
	attemptUnsupported                   // the engine answered in a way the gateway cannot resume (relayed as such)
)

// resumeState is what the gateway knows of a resumable answer across its
// engine attempts.
type resumeState struct {
	chat     bool
	attempts int // engine attempts that ended preempted

	id, created []byte // the first attempt's raw id and created
	text        []byte // the content forwarded (or kept, for a non-streamed client) so far
	reasoning   []byte // a non-streamed client's reasoning content
	reasonKey   string // its member name ("reasoning_content" or "reasoning")
	finish      []byte // the raw finish_reason of the last choice that had one
	header      bool   // the client's response header was written

	generated  int64 // completion tokens of the attempts before this one
	prompt     int64 // the client's prompt tokens (first attempt's usage), -1: unknown
	cached     int64
	recomputed int64 // prompt tokens prefilled again by resumed attempts

	// this attempt
	usage      sse.Usage // cumulative usage at the last chunk taken (continuous usage)
	hasUsage   bool
	deltas     int64     // content chunks taken
	final      sse.Usage // the attempt's final usage chunk
	hasFinal   bool
	errorEvent bool
	pinned     bool // took a turn the gateway cannot resume

	chunks int  // chunks with choices taken, over every attempt
	cut    bool // the engine went past the output limit: cut
}

// takenTokens is what this attempt generated up to the last chunk taken.
func (rs *resumeState) takenTokens() int64 {
	if rs.hasUsage {
		return rs.usage.CompletionTokens
	}
	return rs.deltas
}

// forwardResumable sends x (a borrower reclaim may preempt) to the engine
// and relays its answer, resuming it after each preemption, until it ends.
func (g *Gateway) forwardResumable(ctx context.Context, w http.ResponseWriter, x *exchange) error {
	rt, pl := x.rt, x.rt.pool
	rs := &resumeState{chat: x.ep == engine.ChatCompletions, prompt: -1}
	limit := x.outputLimit
	if limit == 0 {
		limit = x.rq.maxOutput
	}
	for {
		remaining := int64(0)
		if limit > 0 {
			if remaining = limit - rs.generated; remaining <= 0 {
				// preempted on its last token: the answer is whole
				rs.finish = []byte(`"length"`)
				return g.endResumable(w, x, rs, attemptDone)
			}
		}
		actx, cancel := context.WithCancelCause(ctx)
		x.preempt = cancel
		if !rs.pinned {
			pl.victims.add(x)
		}
		ub := upstreamBody{engine: &pl.engine, model: rt.upstreamModel, cacheSalt: x.view.salts[x.org], outputLimit: remaining}
		if pl.engine.PriorityBody {
			ub.priority, ub.withPrio = pl.engine.Wire(x.priority), true
		}
		body := x.rq.resumed(rs.chat, rs.text, rs.generated, pl.engine.ContinuousUsage || x.rq.continuousOK).encode(ub)
		end, err := g.attempt(actx, w, x, rs, body)
		picked := pl.victims.remove(x)
		cancel(nil)
		if end == attemptPreempted {
			if picked && ctx.Err() == nil && x.r.Context().Err() == nil {
				if g.park(ctx, x, rs) == nil {
					continue
				}
				return g.endResumable(w, x, rs, attemptBroken) // the client left, or the longest duration passed
			}
			end = attemptBroken
		}
		x.victim = picked // picked as it finished: its slot was counted as coming
		if err != nil {
			return err
		}
		return g.endResumable(w, x, rs, end)
	}
}

// park gives x's slot back after a preemption, counts what the attempt
// generated, and waits for a slot again, ahead of the borrowers of its
// priority that arrived after it.
func (g *Gateway) park(ctx context.Context, x *exchange, rs *resumeState) error {
	pl := x.rt.pool
	if x.up != nil {
		x.up.b.inflight.Add(-1)
		x.up = nil
	}
	g.countAttempt(rs)
	pl.queue.free(true, x.top) // a band borrower too waits in the queue from now on
	x.queued, x.top = false, false
	x.rec.Preemptions++
	if err := pl.queue.resume(ctx, x.queueKeyOf(), x.arrival, g.now); err != nil {
		return err
	}
	x.queued = true
	g.m.resumed.WithLabelValues(pl.name).Inc()
	return nil
}

// countAttempt adds what a preempted attempt generated (and prefilled
// again) to rs, and resets the attempt's figures.
func (g *Gateway) countAttempt(rs *resumeState) {
	if rs.attempts == 0 && rs.hasUsage {
		rs.prompt, rs.cached = rs.usage.PromptTokens, rs.usage.CachedTokens
	}
	if rs.attempts > 0 && rs.hasUsage {
		rs.recomputed += max(0, rs.usage.PromptTokens-rs.usage.CachedTokens)
	}
	rs.generated += rs.takenTokens()
	rs.attempts++
	rs.usage, rs.hasUsage, rs.deltas = sse.Usage{}, false, 0
}

// attempt sends one engine attempt and relays it. A non-nil error is the
// answer to give the client instead (the first attempt failed before any
// byte reached it).
func (g *Gateway) attempt(ctx context.Context, w http.ResponseWriter, x *exchange, rs *resumeState, body []byte) (attemptEnd, error) {
	resp, err := g.roundTrip(ctx, x, body)
	if err != nil {
		if context.Cause(ctx) == errPreempted {
			return attemptPreempted, nil
		}
		if rs.attempts > 0 || rs.header {
			return attemptBroken, nil
		}
		x.rec.Outcome = llmflow.OutcomeUnreachable
		if x.r.Context().Err() != nil {
			x.rec.Outcome, x.rec.Status = llmflow.OutcomeClientGone, statusClientGone
			g.estimate(x, 0, llmflow.EstimateClientGone)
			return attemptUnsupported, nil
		}
		x.rec.Status = statusOf(err)
		return attemptUnsupported, err
	}
	defer resp.Body.Close()
	switch {
	case resp.StatusCode == http.StatusOK && isEventStream(resp.Header):
	case rs.attempts > 0 || rs.header:
		// an engine that refuses to continue an answer (an old
		// llama-server): the client's answer breaks off
		g.log.Warn("engine refused to resume a preempted request", "request_id", x.id, "upstream", x.up.name,
			"status", resp.StatusCode, "content_type", resp.Header.Get("Content-Type"))
		return attemptBroken, nil
	case resp.StatusCode == http.StatusOK:
		return attemptUnsupported, g.relayBody(w, x, resp) // the engine did not stream
	default:
		return attemptUnsupported, g.relayError(x, resp)
	}
	var src io.Reader = resp.Body
	var idle *idleReader
	if d := g.cfg.Limits.StreamIdleTimeout; d > 0 {
		idle = newIdleReader(resp.Body, d, func() { x.preempt(nil) })
		defer idle.stop()
		src = idle
	}
	onEvent := func() {}
	if idle != nil {
		onEvent = idle.event
	}
	end := g.relayChunks(ctx, w, x, rs, src, onEvent)
	x.upDone = g.now()
	if end == attemptBroken && idle != nil && idle.fired.Load() {
		x.rec.EstimateReason = llmflow.EstimateIdleTimeout
	}
	return end, nil
}

// chunk is what relayChunks reads of one event's data, without decoding
// it: raw values of the top-level members and of the first choice's.
type chunk struct {
	id, created, choices, errVal []byte
	// the first choice
	delta, text, finish []byte
	// its delta
	role, content, reasoning, toolCalls, functionCall []byte
	reasonKey                                         string
}

// scanChunk reads data; ok is false when it is not a JSON object.
func scanChunk(data []byte) (c chunk, ok bool) {
	it, ok := jsonscan.NewObject(data)
	if !ok {
		return c, false
	}
	for {
		k, v, more := it.Next()
		if !more {
			break
		}
		switch string(k) {
		case "id":
			c.id = v
		case "created":
			c.created = v
		case "choices":
			c.choices = v
		case "error":
			c.errVal = v
		}
	}
	if it.Bad() {
		return c, false
	}
	if it, ok := jsonscan.NewObject(firstElement(c.choices)); ok {
		for {
			k, v, more := it.Next()
			if !more {
				break
			}
			switch string(k) {
			case "delta":
				c.delta = v
			case "text":
				c.text = v
			case "finish_reason":
				c.finish = v
			}
		}
	}
	if it, ok := jsonscan.NewObject(c.delta); ok {
		for {
			k, v, more := it.Next()
			if !more {
				break
			}
			switch string(k) {
			case "role":
				c.role = v
			case "content":
				c.content = v
			case "reasoning_content", "reasoning":
				if !isNull(v) {
					c.reasoning, c.reasonKey = v, string(k)
				}
			case "tool_calls":
				c.toolCalls = v
			case "function_call":
				c.functionCall = v
			}
		}
	}
	return c, true
}

// firstElement is the first element of the JSON array arr, nil when arr
// is not a non-empty array.
func firstElement(arr []byte) []byte {
	if len(arr) == 0 || arr[0] != '[' {
		return nil
	}
	i := jsonscan.SkipWS(arr, 1)
	e := jsonscan.SkipValue(arr, i)
	if e <= i {
		return nil
	}
	return arr[i:e]
}

// appendText appends the JSON string v decoded to dst; ok is false when v
// is not a string. Strings without escapes (most deltas) are copied as
// they are.
func appendText(dst, v []byte) ([]byte, bool) {
	if len(v) < 2 || v[0] != '"' {
		return dst, false
	}
	if bytes.IndexByte(v, '\\') < 0 {
		return append(dst, v[1:len(v)-1]...), true
	}
	var s string
	if json.Unmarshal(v, &s) != nil {
		return dst, false
	}
	return append(dst, s...), true
}

// isString reports whether v is a non-empty JSON string.
func isString(v []byte) bool { return len(v) > 2 && v[0] == '"' }

// relayChunks reads one attempt's events and forwards the chunks it takes
// (streamed clients), until [DONE], the end of src, or a preemption. It
// reads each chunk without decoding it (scanChunk): a borrower's stream
// costs little more than one sse.Copy relays. As sse.Copy, it flushes what
// it wrote before it waits for the engine and before it returns: the
// chunks that arrived together leave in one write.
func (g *Gateway) relayChunks(ctx context.Context, w http.ResponseWriter, x *exchange, rs *resumeState, src io.Reader, onEvent func()) attemptEnd {
	rd := sse.NewReader(src, 0)
	if x.rq.stream {
		rd.FlushBeforeWait(http.NewResponseController(w).Flush)
	}
	end := g.relayEvents(ctx, w, x, rs, rd, onEvent)
	if rd.Flush() != nil {
		return attemptClientGone
	}
	return end
}

// relayEvents is relayChunks' loop over rd.
func (g *Gateway) relayEvents(ctx context.Context, w http.ResponseWriter, x *exchange, rs *resumeState, rd *sse.Reader, onEvent func()) attemptEnd {
	pl := x.rt.pool
	var out []byte
	model := appendJSONString(nil, x.rq.model)
	for {
		ev, err := rd.Next()
		if err != nil {
			var we *sse.WriteError
			switch {
			case errors.As(err, &we):
				return attemptClientGone // the flush before the wait failed
			case context.Cause(ctx) == errPreempted:
				return attemptPreempted
			}
			return attemptBroken
		}
		onEvent()
		if ev.Data == nil { // a comment (keep-alive)
			if x.rq.stream && !g.relayEvent(w, x, rs, rd, ev.Raw) {
				return attemptClientGone
			}
			continue
		}
		if bytes.HasPrefix(ev.Data, []byte("[DONE]")) {
			return attemptDone
		}
		c, ok := scanChunk(ev.Data)
		if !ok || hasValue(c.errVal) {
			// an error event (scrubbed as an error answer is), or not a
			// chunk at all (relayed as it is)
			raw := ev.Raw
			if ok {
				rs.errorEvent = true
				raw = append(append([]byte("data: "), scrubberFor(x).json(ev.Data)...), "\n\n"...)
			}
			if x.rq.stream && !g.relayEvent(w, x, rs, rd, raw) {
				return attemptClientGone
			}
			continue
		}
		u, hasU := sse.ParseUsage(ev.Data)
		if firstElement(c.choices) == nil {
			if hasU {
				rs.final, rs.hasFinal = u, true // the final usage chunk
			}
			continue
		}
		content := c.content
		if c.delta == nil {
			content = c.text
		}
		if !rs.pinned && (isString(c.reasoning) || hasValue(c.toolCalls) || hasValue(c.functionCall)) {
			// no faithful resume from here on
			if !pl.victims.pin(x) {
				return attemptPreempted
			}
			rs.pinned = true
		}
		if !rs.pinned && x.pickedNow() {
			return attemptPreempted // this chunk is regenerated by the resumed attempt
		}
		if rs.id == nil {
			rs.id, rs.created = append([]byte(nil), c.id...), append([]byte(nil), c.created...)
		}
		roleOnly := c.delta != nil && c.role != nil && !isString(content) && c.reasoning == nil &&
			!hasValue(c.finish) && !hasValue(c.toolCalls)
		if rs.attempts > 0 && roleOnly {
			continue // the client has it from the first attempt
		}
		if rs.chunks++; x.maxDeltas() > 0 && rs.chunks > x.maxDeltas() {
			// an engine generating past the output limit it was given
			g.log.Warn("engine generated past its output limit: stream cut", "request_id", x.id, "upstream", x.up.name,
				"max_tokens", x.outputBound())
			rs.cut = true
			if x.rq.stream {
				g.writeEvent(w, x, rs, []byte("data: {\"error\":{\"message\":\"the engine generated more than the output limit; the answer was cut\",\"type\":\"server_error\",\"param\":null,\"code\":\"upstream_error\"}}\n\n"))
			}
			return attemptBroken
		}
		if len(rs.text)+len(content) > int(g.cfg.Limits.MaxResponseBytes) {
			// the answer so far is kept to resume it (and, for a client that
			// did not stream, to answer): beyond the response size limit it
			// is neither
			if !x.rq.stream {
				rs.cut = true
				return attemptBroken
			}
			if !rs.pinned && !pl.victims.pin(x) {
				return attemptPreempted
			}
			rs.pinned = true
			content = nil
		}
		rs.text, _ = appendText(rs.text, content)
		if c.reasoning != nil && !x.rq.stream {
			rs.reasoning, _ = appendText(rs.reasoning, c.reasoning)
			rs.reasonKey = c.reasonKey
		}
		if !roleOnly {
			rs.deltas++
		}
		if hasU {
			rs.usage, rs.hasUsage = u, true
		}
		if hasValue(c.finish) {
			rs.finish = append(rs.finish[:0], c.finish...)
		}
		if x.rq.stream {
			out = rs.rewrite(out[:0], ev.Data, x, model, hasU)
			if !g.relayEvent(w, x, rs, rd, out) {
				return attemptClientGone
			}
		}
	}
}

func hasValue(v []byte) bool { return len(v) > 0 && string(v) != "null" && string(v) != "[]" }

// pickedNow reports whether reclaim picked x (its engine request is being
// cancelled).
func (x *exchange) pickedNow() bool { return x.picked.Load() }

// rewrite appends to b the event "data: <chunk>\n\n" with chunk's id and
// created those of the first attempt, its model the client's, and its
// usage the client's cumulative one when the client asked for continuous
// usage (else none).
func (rs *resumeState) rewrite(b, data []byte, x *exchange, model []byte, hasUsage bool) []byte {
	b = append(b, "data: {"...)
	it, _ := jsonscan.NewObject(data)
	n := 0
	for {
		k, v, more := it.Next()
		if !more {
			break
		}
		switch string(k) {
		case "id":
			v = rs.id
		case "created":
			v = rs.created
		case "model":
			v = model
		case "usage":
			if !x.rq.continuousOK || !hasUsage {
				continue
			}
			v = rs.clientUsage(nil, rs.usage)
		}
		if n > 0 {
			b = append(b, ',')
		}
		n++
		b = append(b, '"')
		b = append(b, k...) // the raw key, as the engine spelled it
		b = append(b, '"', ':')
		b = append(b, v...)
	}
	return append(b, "}\n\n"...)
}

// clientUsage appends the client's usage object for the attempt's engine
// usage u: the prompt counted once, every completion token of every
// attempt.
func (rs *resumeState) clientUsage(b []byte, u sse.Usage) []byte {
	p, c, cached := rs.clientCounts(u)
	b = append(b, `{"prompt_tokens":`...)
	b = strconv.AppendInt(b, p, 10)
	b = append(b, `,"total_tokens":`...)
	b = strconv.AppendInt(b, p+c, 10)
	b = append(b, `,"completion_tokens":`...)
	b = strconv.AppendInt(b, c, 10)
	if cached > 0 {
		b = append(b, `,"prompt_tokens_details":{"cached_tokens":`...)
		b = strconv.AppendInt(b, cached, 10)
		b = append(b, '}')
	}
	return append(b, '}')
}

// clientCounts are the client's prompt, completion and cached tokens for
// the engine usage u of the current attempt.
func (rs *resumeState) clientCounts(u sse.Usage) (prompt, completion, cached int64) {
	if rs.attempts == 0 {
		return u.PromptTokens, u.CompletionTokens, u.CachedTokens
	}
	prompt, cached = rs.prompt, rs.cached
	if prompt < 0 {
		prompt = max(0, u.PromptTokens-rs.generated) // the resumed prompt holds the text so far
	}
	return prompt, rs.generated + u.CompletionTokens, cached
}

// relayEvent writes one event to a streaming client, its response header
// first; rd flushes it before it waits for the engine (relayChunks).
func (g *Gateway) relayEvent(w http.ResponseWriter, x *exchange, rs *resumeState, rd *sse.Reader, ev []byte) bool {
	if !g.writeEventOnly(w, x, rs, ev) {
		return false
	}
	rd.Written()
	return true
}

// writeEvent writes one event to a streaming client, its response header
// first, and flushes.
func (g *Gateway) writeEvent(w http.ResponseWriter, x *exchange, rs *resumeState, ev []byte) bool {
	return g.writeEventOnly(w, x, rs, ev) && http.NewResponseController(w).Flush() == nil
}

// writeEventOnly is writeEvent without the flush.
func (g *Gateway) writeEventOnly(w http.ResponseWriter, x *exchange, rs *resumeState, ev []byte) bool {
	if !rs.header {
		h := w.Header()
		h["Content-Type"] = []string{"text/event-stream"}
		h["Cache-Control"] = []string{"no-cache"}
		h["X-Accel-Buffering"] = []string{"no"}
		w.WriteHeader(http.StatusOK)
		rs.header = true
	}
	if x.first.IsZero() {
		x.first = g.now()
	}
	_, err := w.Write(ev)
	return err == nil
}

// endResumable completes x's answer after its last attempt ended with end:
// the usage and outcome in its record, and for a streamed client the usage
// chunk it asked for and [DONE] (the record queued before [DONE], as
// recordAtDone does), for the others one answer.
func (g *Gateway) endResumable(w http.ResponseWriter, x *exchange, rs *resumeState, end attemptEnd) error {
	if end == attemptUnsupported {
		return nil // relayed as the engine answered; the record is set
	}
	if rs.attempts > 0 && rs.hasFinal {
		rs.recomputed += max(0, rs.final.PromptTokens-rs.final.CachedTokens)
	}
	x.rec.RecomputedTokens = rs.recomputed
	if rs.recomputed > 0 {
		g.m.recomputed.WithLabelValues(x.rt.pool.name).Add(float64(rs.recomputed))
	}
	x.rec.Status = http.StatusOK
	switch {
	case end == attemptClientGone || x.r.Context().Err() != nil:
		x.rec.Outcome, x.rec.Status = llmflow.OutcomeClientGone, statusClientGone
		g.estimateResumed(x, rs, llmflow.EstimateClientGone)
		return nil
	case rs.errorEvent || rs.cut:
		x.rec.Outcome = llmflow.OutcomeUpstreamError
		g.estimateResumed(x, rs, llmflow.EstimateUpstreamError)
	case end == attemptBroken:
		x.rec.Outcome = llmflow.OutcomeIncomplete
		reason := llmflow.EstimateIncomplete
		if x.rec.EstimateReason == llmflow.EstimateIdleTimeout {
			reason = llmflow.EstimateIdleTimeout
		}
		g.estimateResumed(x, rs, reason)
	default:
		x.rec.Outcome = llmflow.OutcomeOK
		g.resumedUsage(x, rs)
	}
	if !x.rq.stream {
		return g.answerAssembled(w, x, rs)
	}
	if x.rec.Outcome != llmflow.OutcomeOK {
		return nil // the stream ends without [DONE]
	}
	if x.rq.wantsUsage && rs.hasFinal {
		b := append([]byte(`data: {"id":`), rs.id...)
		b = append(b, `,"object":`...)
		b = appendJSONString(b, rs.object())
		b = append(b, `,"created":`...)
		b = append(b, rs.created...)
		b = append(b, `,"model":`...)
		b = appendJSONString(b, x.rq.model)
		b = append(b, `,"choices":[],"usage":`...)
		b = rs.clientUsage(b, rs.final)
		b = append(b, "}\n\n"...)
		if !g.writeEvent(w, x, rs, b) {
			x.rec.Outcome, x.rec.Status = llmflow.OutcomeClientGone, statusClientGone
			return nil
		}
	}
	if g.rec != nil {
		if x.first.IsZero() {
			x.first = g.now()
		}
		g.completeRecord(x, g.now())
		g.rec.Enqueue(x.rec)
		x.recorded = true
	}
	// [DONE] leaves with the answer's last chunk once finish has released
	// the request, as relayStream's does (sse.Options.LeaveEnd)
	g.writeEventOnly(w, x, rs, []byte("data: [DONE]\n\n"))
	return nil
}

func (rs *resumeState) object() string {
	if rs.chat {
		return "chat.completion.chunk"
	}
	return "text_completion"
}

// resumedUsage sets x's usage from a complete answer's final usage: the
// engine's own when it never was preempted, else the client's view of it.
func (g *Gateway) resumedUsage(x *exchange, rs *resumeState) {
	if !rs.hasFinal {
		g.estimateResumed(x, rs, llmflow.EstimateNoUsage)
		return
	}
	p, c, cached := rs.clientCounts(rs.final)
	u := sse.Usage{PromptTokens: p, CompletionTokens: c, CachedTokens: cached, Malformed: rs.final.Malformed}
	if !x.validUsage(u) {
		g.estimateResumed(x, rs, llmflow.EstimateInvalidUsage)
		g.logInvalidUsage(x, rs.final)
		return
	}
	x.setUsage(u)
}

// estimateResumed charges what is known of an answer that did not end
// with its usage: the engine's running count where it gave one, else the
// prompt estimate and the chunks taken.
func (g *Gateway) estimateResumed(x *exchange, rs *resumeState, why llmflow.EstimateReason) {
	g.estimate(x, rs.generated+rs.takenTokens(), why)
	if rs.prompt >= 0 {
		x.rec.PromptTokens = rs.prompt
	} else if rs.attempts == 0 && rs.hasUsage {
		x.rec.PromptTokens = rs.usage.PromptTokens
	}
}

// answerAssembled answers a client that did not stream with one answer
// built from the chunks: the first attempt's id and created, the text of
// every attempt, the last finish reason and the client's usage.
func (g *Gateway) answerAssembled(w http.ResponseWriter, x *exchange, rs *resumeState) error {
	switch x.rec.Outcome {
	case llmflow.OutcomeOK:
	case llmflow.OutcomeUpstreamError:
		e := &llmflow.Error{Code: llmflow.EUPSTREAM, Message: "the upstream failed", Err: errors.New("error event in the engine's stream")}
		x.rec.Status = statusOf(e)
		return e
	default:
		e := llmflow.Errorf(llmflow.EUPSTREAM, "the upstream answer broke off")
		x.rec.Status = statusOf(e)
		return e
	}
	finish := rs.finish
	if len(finish) == 0 {
		finish = []byte("null")
	}
	b := append([]byte(`{"id":`), rs.id...)
	if rs.chat {
		b = append(b, `,"object":"chat.completion","created":`...)
	} else {
		b = append(b, `,"object":"text_completion","created":`...)
	}
	b = append(b, rs.created...)
	b = append(b, `,"model":`...)
	b = appendJSONString(b, x.rq.model)
	if rs.chat {
		b = append(b, `,"choices":[{"index":0,"message":{"role":"assistant","content":`...)
		b = appendJSONString(b, string(rs.text))
		if rs.reasonKey != "" {
			b = append(b, ',')
			b = appendJSONString(b, rs.reasonKey)
			b = append(b, ':')
			b = appendJSONString(b, string(rs.reasoning))
		}
		b = append(b, `},"logprobs":null,"finish_reason":`...)
	} else {
		b = append(b, `,"choices":[{"index":0,"text":`...)
		b = appendJSONString(b, string(rs.text))
		b = append(b, `,"logprobs":null,"finish_reason":`...)
	}
	b = append(b, finish...)
	b = append(b, `}],"usage":`...)
	if rs.hasFinal {
		b = rs.clientUsage(b, rs.final)
	} else {
		b = append(b, "null"...)
	}
	b = append(b, "}\n"...)
	g.writeAnswer(w, x, b)
	return nil
}

// resumed returns the request to send for an attempt of a resumable
// answer: streamed (with usage, and continuous usage when continuous),
// and, once text was generated, that text to continue (chat: a final
// assistant message with continue_final_message and no generation prompt;
// completions: after the prompt) with min_tokens lowered by generated.
// The output limit is the caller's (upstreamBody.outputLimit).
func (rq *clientRequest) resumed(chat bool, text []byte, generated int64, continuous bool) *clientRequest {
	c := *rq
	c.members = make([]member, 0, len(rq.members)+3)
	for _, m := range rq.members {
		switch string(m.name) {
		case "stream", "stream_options", "continue_final_message", "add_generation_prompt":
			continue
		case "messages":
			if len(text) > 0 {
				m.val = appendAssistant(m.val, text)
			}
		case "prompt":
			if len(text) > 0 {
				var p string
				if json.Unmarshal(m.val, &p) == nil {
					m.val = appendJSONString(nil, p+string(text))
				}
			}
		case "min_tokens":
			if n := jsonscan.ParseInt(m.val); n > 0 && generated > 0 {
				m.val = strconv.AppendInt(nil, max(0, n-generated), 10)
			}
		}
		c.members = append(c.members, m)
	}
	c.members = append(c.members, member{name: []byte("stream"), val: []byte("true")})
	if chat && len(text) > 0 {
		c.members = append(c.members,
			member{name: []byte("continue_final_message"), val: []byte("true")},
			member{name: []byte("add_generation_prompt"), val: []byte("false")})
	}
	c.stream, c.continuousOK = true, continuous
	return &c
}

// appendAssistant returns the messages array arr with an assistant message
// holding text appended.
func appendAssistant(arr, text []byte) []byte {
	i := bytes.LastIndexByte(arr, ']')
	head := bytes.TrimRight(arr[:i], " \t\r\n")
	b := make([]byte, 0, len(arr)+len(text)+48)
	b = append(b, head...)
	if len(head) > 0 && head[len(head)-1] != '[' {
		b = append(b, ',')
	}
	b = append(b, `{"role":"assistant","content":`...)
	b = appendJSONString(b, string(text))
	return append(b, "}]"...)
}

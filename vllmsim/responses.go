package vllmsim

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"
)

// responsesRequestBody is the part of a Responses API request the sim
// reads.
type responsesRequestBody struct {
	Model              string          `json:"model"`
	Input              json.RawMessage `json:"input"`
	Instructions       *string         `json:"instructions"`
	MaxOutputTokens    *int            `json:"max_output_tokens"`
	Stream             bool            `json:"stream"`
	Priority           *int64          `json:"priority"`
	CacheSalt          json.RawMessage `json:"cache_salt"`
	Store              *bool           `json:"store"`
	Background         bool            `json:"background"`
	PreviousResponseID *string         `json:"previous_response_id"`
}

// inputBytes counts the text bytes of a Responses "input": a string, or a
// list of items whose "content" is a string or a list of parts with text
// (messages), or whose "output" is a string (function call outputs).
func inputBytes(raw json.RawMessage) (int, error) {
	var str string
	if json.Unmarshal(raw, &str) == nil {
		return len(str), nil
	}
	var items []struct {
		Content json.RawMessage `json:"content"`
		Output  *string         `json:"output"`
	}
	if json.Unmarshal(raw, &items) != nil || len(items) == 0 {
		return 0, errors.New("'input' must be a string or a non-empty list of input items")
	}
	n := 0
	for _, it := range items {
		n += contentBytes(it.Content)
		if it.Output != nil {
			n += len(*it.Output)
		}
	}
	return n, nil
}

// responses serves POST /v1/responses as vLLM does without its response
// store (the default): one message output item of the answer's tokens;
// usage as input_tokens, output_tokens and input_tokens_details; a stream
// of typed events ("event: <type>" and the JSON with the same "type" and
// a sequence_number) ending with response.completed, or
// response.incomplete when max_output_tokens was reached, and no [DONE].
func (s *Server) responses(w http.ResponseWriter, r *http.Request) {
	raw, rec, ok := s.readBody(w, r)
	if !ok {
		return
	}
	var req responsesRequestBody
	if err := json.Unmarshal(raw, &req); err != nil {
		s.writeError(w, rec, http.StatusBadRequest, "BadRequestError", "invalid request: %v", err)
		return
	}
	prio, ok := s.priorityOf(w, r, rec, req.Priority)
	if !ok {
		return
	}
	if !s.models[req.Model] {
		s.writeError(w, rec, http.StatusNotFound, "NotFoundError", "The model `%s` does not exist.", req.Model)
		return
	}
	if req.Background {
		// VLLM_ENABLE_RESPONSES_API_STORE is off
		s.writeError(w, rec, http.StatusBadRequest, "BadRequestError", "background can only be used when `store` is true")
		return
	}
	if req.PreviousResponseID != nil {
		s.writeError(w, rec, http.StatusNotFound, "NotFoundError", "Response with id '%s' not found.", *req.PreviousResponseID)
		return
	}
	salt, ok := s.saltOf(w, rec, req.CacheSalt, prio)
	if !ok {
		return
	}
	n, err := inputBytes(req.Input)
	if err != nil {
		s.writeError(w, rec, http.StatusBadRequest, "BadRequestError", "%v", err)
		return
	}
	if req.Instructions != nil {
		n += len(*req.Instructions)
	}
	nPrompt := textTokens(n)
	maxTokens, explicit := min(s.cfg.DefaultMaxTokens, s.maxLen-nPrompt), false
	if req.MaxOutputTokens != nil {
		maxTokens, explicit = *req.MaxOutputTokens, true
		if maxTokens < 1 {
			s.writeError(w, rec, http.StatusBadRequest, "BadRequestError", "max_output_tokens must be at least 1, got %d.", maxTokens)
			return
		}
	}
	if nPrompt+maxTokens > s.maxLen || maxTokens < 1 {
		s.writeError(w, rec, http.StatusBadRequest, "BadRequestError",
			"This model's maximum context length is %d tokens. However, you requested %d tokens (%d in the input, %d in the output). Please reduce the length of the input or output.",
			s.maxLen, nPrompt+maxTokens, nPrompt, maxTokens)
		return
	}
	promptKey := append(append([]byte(nil), req.Input...), 0)
	if req.Instructions != nil {
		promptKey = append(promptKey, *req.Instructions...)
	}
	g, ok := s.enqueue(w, rec, req.Model, salt, promptKey, int(prio), nPrompt, 0, maxTokens, 1)
	if !ok {
		return
	}
	s.log.Debug("vllmsim: queued response", "seq", g.seq.ID, "model", req.Model, "priority", prio,
		"prompt_tokens", nPrompt, "max_tokens", maxTokens, "stream", req.Stream)
	rs := &simResponse{
		id: newID("resp_"), msgID: newID("msg_"), created: time.Now().Unix(), model: req.Model,
		instructions: req.Instructions, maxOutput: req.MaxOutputTokens, store: req.Store != nil && *req.Store,
		limited: explicit,
	}
	if req.Stream {
		s.streamResponse(w, r, g, rs)
	} else {
		s.unaryResponse(w, r, g, rs)
	}
}

// simResponse is what the sim's Response objects are built from.
type simResponse struct {
	id, msgID    string
	created      int64
	model        string
	instructions *string
	maxOutput    *int
	store        bool
	limited      bool // max_output_tokens set: the answer ends incomplete
}

// status is the response's status once gen tokens were generated and it
// is done.
func (rs *simResponse) status(done bool) string {
	switch {
	case !done:
		return "in_progress"
	case rs.limited:
		return "incomplete"
	}
	return "completed"
}

// message is the output item of the answer text.
func (rs *simResponse) message(text, status string) map[string]any {
	content := []any{}
	if status != "in_progress" {
		content = []any{outputText(text)}
	}
	return map[string]any{"id": rs.msgID, "type": "message", "role": "assistant", "status": status, "content": content}
}

func outputText(text string) map[string]any {
	return map[string]any{"type": "output_text", "text": text, "annotations": []any{}, "logprobs": []any{}}
}

// object is the Response object; usage nil while in progress.
func (rs *simResponse) object(status string, output []any, usage any) map[string]any {
	var incomplete any
	if status == "incomplete" {
		incomplete = map[string]any{"reason": "max_output_tokens"}
	}
	return map[string]any{
		"id": rs.id, "object": "response", "created_at": rs.created, "model": rs.model,
		"status": status, "incomplete_details": incomplete, "error": nil,
		"instructions": rs.instructions, "max_output_tokens": rs.maxOutput, "metadata": nil,
		"output": output, "parallel_tool_calls": true, "previous_response_id": nil,
		"reasoning": nil, "store": rs.store, "temperature": 1.0, "top_p": 1.0,
		"text": map[string]any{"format": map[string]any{"type": "text"}}, "tool_choice": "auto", "tools": []any{},
		"truncation": "disabled", "background": false, "service_tier": "auto", "user": nil,
		"usage": usage,
	}
}

// responseUsage is vLLM's ResponseUsage (OpenAI's type: the details are
// always there).
func responseUsage(prompt, output, cached int) map[string]any {
	return map[string]any{
		"input_tokens": prompt, "input_tokens_details": map[string]any{"cached_tokens": cached},
		"output_tokens": output, "output_tokens_details": map[string]any{"reasoning_tokens": 0},
		"total_tokens": prompt + output,
	}
}

func answerText(g *genReq, gen int) string {
	var text strings.Builder
	for i := range gen {
		text.WriteString(tokenText(g.offset + i))
	}
	return text.String()
}

func (s *Server) unaryResponse(w http.ResponseWriter, r *http.Request, g *genReq, rs *simResponse) {
	gen, ok := s.waitAll(w, r, g)
	if !ok {
		return
	}
	status := rs.status(true)
	resp := rs.object(status, []any{rs.message(answerText(g, gen), status)}, responseUsage(g.seq.PromptTokens, gen, g.cached))
	s.mu.Lock()
	g.received.Status = http.StatusOK
	s.mu.Unlock()
	writeJSON(w, http.StatusOK, resp)
}

// streamResponse streams vLLM's events of a plain text answer: created,
// in_progress, output_item.added, content_part.added, one
// output_text.delta per token, output_text.done, content_part.done,
// output_item.done, then completed (or incomplete).
func (s *Server) streamResponse(w http.ResponseWriter, r *http.Request, g *genReq, rs *simResponse) {
	flusher, _ := w.(http.Flusher)
	w.Header().Set("Content-Type", "text/event-stream; charset=utf-8")
	w.Header().Set("Cache-Control", "no-cache")
	w.WriteHeader(http.StatusOK)
	s.mu.Lock()
	g.received.Status = http.StatusOK
	s.mu.Unlock()

	var buf bytes.Buffer
	seq := 0
	send := func(typ string, ev map[string]any) {
		ev["type"], ev["sequence_number"] = typ, seq
		seq++
		b, _ := json.Marshal(ev)
		fmt.Fprintf(&buf, "event: %s\ndata: %s\n\n", typ, b)
	}
	flush := func() bool {
		_, err := w.Write(buf.Bytes())
		buf.Reset()
		if flusher != nil {
			flusher.Flush()
		}
		if err != nil {
			s.abort(g)
			return false
		}
		return true
	}
	item := func(extra map[string]any) map[string]any {
		extra["item_id"], extra["output_index"], extra["content_index"] = rs.msgID, 0, 0
		return extra
	}
	send("response.created", map[string]any{"response": rs.object("in_progress", []any{}, nil)})
	send("response.in_progress", map[string]any{"response": rs.object("in_progress", []any{}, nil)})
	send("response.output_item.added", map[string]any{"output_index": 0, "item": rs.message("", "in_progress")})
	send("response.content_part.added", item(map[string]any{"part": outputText("")}))
	if !flush() {
		return
	}
	sent := 0
	for {
		gen, done, errMsg, ok := s.wait(r, g)
		if !ok {
			return
		}
		for ; sent < gen; sent++ {
			send("response.output_text.delta", item(map[string]any{"delta": tokenText(g.offset + sent), "logprobs": []any{}}))
		}
		if errMsg != "" {
			send("error", map[string]any{"code": "InternalServerError", "message": errMsg, "param": nil})
			flush()
			return
		}
		if done {
			break
		}
		if !flush() {
			return
		}
	}
	text := answerText(g, sent)
	status := rs.status(true)
	msg := rs.message(text, status)
	send("response.output_text.done", item(map[string]any{"text": text, "logprobs": []any{}}))
	send("response.content_part.done", item(map[string]any{"part": outputText(text)}))
	send("response.output_item.done", map[string]any{"output_index": 0, "item": msg})
	send("response."+status, map[string]any{"response": rs.object(status, []any{msg}, responseUsage(g.seq.PromptTokens, sent, g.cached))})
	flush()
}

// getModel answers GET /v1/models/{id} with the model's card, as in the
// list, or 404.
func (s *Server) getModel(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	if !s.models[id] {
		s.writeError(w, nil, http.StatusNotFound, "NotFoundError", "The model `%s` does not exist.", id)
		return
	}
	writeJSON(w, http.StatusOK, s.modelCard(id))
}

package vllmsim

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"log/slog"
	"math"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// PriorityHeader is vLLM's request header that overrides the body priority.
const PriorityHeader = "X-Vllm-Priority"

// Config configures a Server. Zero values take the defaults.
type Config struct {
	Models            []string      // served model names, default ["sim/llama"]
	APIKey            string        // "" = no auth; else "Authorization: Bearer <key>" on /v1/*
	Sched             SchedConfig   // engine size and policy
	StepInterval      time.Duration // wall time per engine step, default 20ms
	DefaultMaxTokens  int           // when the request sets neither max_tokens nor max_completion_tokens, default 16
	ForceIncludeUsage bool          // vLLM --enable-force-include-usage
	ReceivedLimit     int           // how many received requests Received keeps, default 256
	Log               *slog.Logger  // optional
}

// Stats is a snapshot of the server's counters, for tests.
type Stats struct {
	Running, Waiting      int
	KVUsage               float64 // 0..1
	UsedBlocks            int
	Preemptions           int64
	PreemptionsByPriority map[int]int64 // keyed by the victim's priority
	Aborted               int64         // generation requests aborted (client left, or Close)
	Served                int64         // requests accepted: generation requests queued, embeddings answered
	Completed             int64         // generation requests that finished all their tokens
	Rejected              int64         // requests answered with a 4xx
	Steps                 int64         // engine steps run
	PromptTokens          int64         // vllm:prompt_tokens_total
	GenerationTokens      int64         // vllm:generation_tokens_total
}

// Received is one request as it reached the simulated engine.
type Received struct {
	Time     time.Time
	Method   string
	Path     string
	Header   http.Header
	Body     map[string]any // decoded JSON body; nil if it did not decode
	RawBody  []byte
	Model    string
	Stream   bool
	Priority int   // the priority the sim applied (header over body)
	SeqID    SeqID // 0 when the request never reached the scheduler

	// Filled in as the request progresses (0 = not yet / never).
	AdmittedStep int64 // step of its first admission to running
	FinishedStep int64 // step it generated its last token
	Status       int   // HTTP status answered (200 for streams once started)
}

// Server is a simulated vLLM OpenAI-compatible server. It implements
// http.Handler. Create it with New and stop it with Close.
type Server struct {
	cfg    Config
	models map[string]bool
	mux    *http.ServeMux
	reg    *prometheus.Registry
	log    *slog.Logger
	maxLen int

	wake chan struct{} // buffered(1): work was added
	done chan struct{} // closed by Close
	wg   sync.WaitGroup

	mu       sync.Mutex
	closed   bool
	sched    *Scheduler
	reqs     map[SeqID]*genReq
	nextID   SeqID
	arrival  int64
	stats    Stats
	received []*Received
	prefix   map[string]bool // (salt, model, prompt) seen → prefix cache hit
}

// genReq is a generation request in flight.
type genReq struct {
	seq      *Seq
	notify   chan struct{} // buffered(1): tokens generated or done
	gen      int           // tokens generated so far (under Server.mu)
	cached   int           // prefix-cached prompt tokens
	offset   int           // answer position of its first token: tokens already in the prompt (resume)
	seqs     int           // sequences generated: n (or best_of) × prompts; each as long as seq
	done     bool
	err      string // set when aborted by Close
	received *Received
}

// New returns a started Server: its stepping goroutine sleeps until work
// arrives. It panics on an unknown Sched.Policy.
//
// Simplifications: prompt tokens are text bytes / 4 (at least 1), output
// token i of an answer is "tok<i> " (see the package doc for resumed
// requests), n and sampling parameters are ignored (one choice),
// finish_reason is "length" when the request set max_tokens or
// max_completion_tokens and "stop" when DefaultMaxTokens applied (the
// simulated model stops at answer position DefaultMaxTokens).
func New(cfg Config) *Server {
	if len(cfg.Models) == 0 {
		cfg.Models = []string{"sim/llama"}
	}
	cfg.Sched = cfg.Sched.withDefaults()
	if cfg.StepInterval <= 0 {
		cfg.StepInterval = 20 * time.Millisecond
	}
	if cfg.DefaultMaxTokens <= 0 {
		cfg.DefaultMaxTokens = 16
	}
	if cfg.ReceivedLimit <= 0 {
		cfg.ReceivedLimit = 256
	}
	log := cfg.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	s := &Server{
		cfg:    cfg,
		models: make(map[string]bool),
		log:    log,
		maxLen: cfg.Sched.MaxModelLen(),
		wake:   make(chan struct{}, 1),
		done:   make(chan struct{}),
		sched:  NewScheduler(cfg.Sched),
		reqs:   make(map[SeqID]*genReq),
		prefix: make(map[string]bool),
	}
	for _, m := range cfg.Models {
		s.models[m] = true
	}
	s.registerMetrics()
	s.mux = http.NewServeMux()
	s.mux.HandleFunc("POST /v1/chat/completions", func(w http.ResponseWriter, r *http.Request) { s.generate(w, r, true) })
	s.mux.HandleFunc("POST /v1/completions", func(w http.ResponseWriter, r *http.Request) { s.generate(w, r, false) })
	s.mux.HandleFunc("POST /v1/embeddings", s.embeddings)
	s.mux.HandleFunc("POST /v1/responses", s.responses)
	s.mux.HandleFunc("GET /v1/models", s.listModels)
	s.mux.HandleFunc("GET /v1/models/{id...}", s.getModel)
	s.mux.HandleFunc("POST /tokenize", s.tokenize)
	s.mux.HandleFunc("GET /health", func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusOK) })
	s.mux.Handle("GET /metrics", promhttp.HandlerFor(s.reg, promhttp.HandlerOpts{}))
	s.wg.Add(1)
	go s.loop()
	return s
}

// Config returns the configuration with defaults applied.
func (s *Server) Config() Config { return s.cfg }

// MaxModelLen is the max_model_len reported by /v1/models and enforced on
// prompt + max_tokens.
func (s *Server) MaxModelLen() int { return s.maxLen }

// ServeHTTP implements http.Handler, with vLLM's API-key middleware: when
// APIKey is set, every path under /v1 except OPTIONS requests needs
// "Authorization: Bearer <key>"; /health and /metrics stay open.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if s.cfg.APIKey != "" && r.Method != http.MethodOptions &&
		(r.URL.Path == "/v1" || strings.HasPrefix(r.URL.Path, "/v1/")) {
		got := sha256.Sum256([]byte(strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer ")))
		want := sha256.Sum256([]byte(s.cfg.APIKey))
		if !strings.HasPrefix(r.Header.Get("Authorization"), "Bearer ") || subtle.ConstantTimeCompare(got[:], want[:]) != 1 {
			s.countRejected()
			writeJSON(w, http.StatusUnauthorized, map[string]string{"error": "Unauthorized"})
			return
		}
	}
	s.mux.ServeHTTP(w, r)
}

// Close stops the stepping goroutine and aborts every request in flight
// (their handlers return at once). It is idempotent.
func (s *Server) Close() {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return
	}
	s.closed = true
	close(s.done)
	s.mu.Unlock()
	s.wg.Wait()

	s.mu.Lock()
	defer s.mu.Unlock()
	for id, r := range s.reqs {
		s.sched.Abort(id)
		s.stats.Aborted++
		r.done, r.err = true, "server closed"
		delete(s.reqs, id)
		notify(r.notify)
	}
}

// ListenAndServe serves on addr until ctx is done, then shuts down
// gracefully (in-flight requests get up to 5 s to finish) and closes the
// Server. It returns nil after a shutdown caused by ctx.
func (s *Server) ListenAndServe(ctx context.Context, addr string) error {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	return s.Serve(ctx, ln)
}

// Serve is ListenAndServe on an existing listener.
func (s *Server) Serve(ctx context.Context, ln net.Listener) error {
	srv := &http.Server{Handler: s, ReadHeaderTimeout: 10 * time.Second}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	s.log.Info("vllmsim listening", "addr", ln.Addr().String(), "models", s.cfg.Models, "policy", s.cfg.Sched.Policy)
	select {
	case err := <-errc:
		s.Close()
		return err
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	err := srv.Shutdown(sctx)
	s.Close() // aborts what is left, so the handlers return
	if err != nil {
		srv.Close()
	}
	<-errc
	return nil
}

// Stats returns a snapshot of the counters.
func (s *Server) Stats() Stats {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.stats
	st.Running = s.sched.NumRunning()
	st.Waiting = s.sched.NumWaiting()
	st.KVUsage = s.sched.KVUsage()
	st.UsedBlocks = s.sched.UsedBlocks()
	st.Preemptions = s.sched.Preemptions()
	st.PreemptionsByPriority = s.sched.PreemptionsByPriority()
	st.Steps = s.sched.Steps()
	return st
}

// Received returns copies of the last ReceivedLimit POST requests under
// /v1 that passed authentication (generation and embeddings, rejected ones
// included, with Status), oldest first.
func (s *Server) Received() []Received {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]Received, len(s.received))
	for i, r := range s.received {
		out[i] = *r
		out[i].Header = r.Header.Clone()
	}
	return out
}

// RunningBy counts the requests running in the engine right now (not
// waiting, not preempted) by a label computed from each one as received,
// such as its cache_salt: the demo and tests measure running fractions per
// tenant with it. label must not keep the Received.
func (s *Server) RunningBy(label func(r *Received) string) map[string]int {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make(map[string]int)
	for _, seq := range s.sched.Running() {
		if g := s.reqs[seq.ID]; g != nil && g.received != nil {
			out[label(g.received)]++
		}
	}
	return out
}

// ResetReceived forgets the received requests.
func (s *Server) ResetReceived() {
	s.mu.Lock()
	s.received = nil
	s.mu.Unlock()
}

func notify(c chan struct{}) {
	select {
	case c <- struct{}{}:
	default:
	}
}

// loop steps the scheduler every StepInterval while there is work and
// sleeps on s.wake otherwise.
func (s *Server) loop() {
	defer s.wg.Done()
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	for {
		s.mu.Lock()
		busy := s.sched.HasWork()
		s.mu.Unlock()
		if !busy {
			select {
			case <-s.done:
				return
			case <-s.wake:
				continue
			}
		}
		s.step()
		timer.Reset(s.cfg.StepInterval)
		select {
		case <-s.done:
			timer.Stop()
			return
		case <-timer.C:
		}
	}
}

func (s *Server) step() {
	s.mu.Lock()
	defer s.mu.Unlock()
	res := s.sched.Step()
	for _, id := range res.Admitted {
		r := s.reqs[id]
		if r == nil || r.seq.Admissions != 1 {
			continue
		}
		r.received.AdmittedStep = res.Step
		s.stats.PromptTokens += int64(r.seq.PromptTokens)
	}
	s.stats.GenerationTokens += int64(len(res.Emitted))
	for _, e := range res.Emitted {
		if r := s.reqs[e.ID]; r != nil {
			r.gen = e.Index + 1
			notify(r.notify)
		}
	}
	for _, id := range res.Finished {
		if r := s.reqs[id]; r != nil {
			r.done = true
			r.received.FinishedStep = res.Step
			delete(s.reqs, id)
			s.stats.Completed++
			notify(r.notify)
		}
	}
}

func (s *Server) countRejected() {
	s.mu.Lock()
	s.stats.Rejected++
	s.mu.Unlock()
}

// ---- wire types ----

type errorBody struct {
	Error errorInfo `json:"error"`
}

type errorInfo struct {
	Message string  `json:"message"`
	Type    string  `json:"type"`
	Param   *string `json:"param"`
	Code    int     `json:"code"`
}

// writeError answers with vLLM's error shape.
func (s *Server) writeError(w http.ResponseWriter, rec *Received, status int, typ, format string, args ...any) {
	s.mu.Lock()
	s.stats.Rejected++
	if rec != nil {
		rec.Status = status
	}
	s.mu.Unlock()
	writeJSON(w, status, errorBody{Error: errorInfo{Message: fmt.Sprintf(format, args...), Type: typ, Code: status}})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	b, _ := json.Marshal(v)
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", strconv.Itoa(len(b)))
	w.WriteHeader(status)
	w.Write(b)
}

type usageInfo struct {
	PromptTokens        int            `json:"prompt_tokens"`
	TotalTokens         int            `json:"total_tokens"`
	CompletionTokens    *int           `json:"completion_tokens,omitempty"`
	PromptTokensDetails *promptDetails `json:"prompt_tokens_details,omitempty"`
}

type promptDetails struct {
	CachedTokens int `json:"cached_tokens"`
}

func makeUsage(prompt, completion, cached int) *usageInfo {
	u := &usageInfo{PromptTokens: prompt, TotalTokens: prompt + completion, CompletionTokens: &completion}
	if cached > 0 { // vLLM omits the details when nothing was cached
		u.PromptTokensDetails = &promptDetails{CachedTokens: cached}
	}
	return u
}

// genRequestBody is the part of a completion or chat request the sim reads.
type genRequestBody struct {
	Model               string          `json:"model"`
	Messages            json.RawMessage `json:"messages"`
	Prompt              json.RawMessage `json:"prompt"`
	MaxTokens           *int            `json:"max_tokens"`
	MaxCompletionTokens *int            `json:"max_completion_tokens"`
	Stream              bool            `json:"stream"`
	StreamOptions       *struct {
		IncludeUsage         *bool `json:"include_usage"`
		ContinuousUsageStats bool  `json:"continuous_usage_stats"`
	} `json:"stream_options"`
	Priority  *int64          `json:"priority"`
	CacheSalt json.RawMessage `json:"cache_salt"`
	// N and BestOf: sequences per prompt (vLLM: best_of ≥ n are generated,
	// n returned; the sim returns all it generated).
	N      *int `json:"n"`
	BestOf *int `json:"best_of"`

	// Chat only. vLLM's default for add_generation_prompt is true.
	AddGenerationPrompt  *bool `json:"add_generation_prompt"`
	ContinueFinalMessage bool  `json:"continue_final_message"`
}

// chatMessage is the part of a chat message the sim reads.
type chatMessage struct {
	Role    string          `json:"role"`
	Content json.RawMessage `json:"content"`
}

// textTokens approximates a token count as bytes / 4, at least 1.
func textTokens(n int) int { return max(1, n/4) }

// parseMessages decodes a chat "messages" array and counts its text bytes
// (string contents and the text of content parts).
func parseMessages(raw json.RawMessage) ([]chatMessage, int, error) {
	var msgs []chatMessage
	if err := json.Unmarshal(raw, &msgs); err != nil {
		return nil, 0, errors.New("'messages' must be a list of message objects")
	}
	if len(msgs) == 0 {
		return nil, 0, errors.New("'messages' must not be empty")
	}
	n := 0
	for _, m := range msgs {
		n += contentBytes(m.Content)
	}
	return msgs, n, nil
}

// finalText is the text continue_final_message continues: a string content,
// or the last text part of a list of parts (as Hugging Face's chat templates
// pick it); ok is false when there is none.
func finalText(raw json.RawMessage) (string, bool) {
	var str string
	if json.Unmarshal(raw, &str) == nil {
		return str, true
	}
	var parts []struct {
		Text *string `json:"text"`
	}
	if json.Unmarshal(raw, &parts) == nil {
		for i := len(parts) - 1; i >= 0; i-- {
			if parts[i].Text != nil {
				return *parts[i].Text, true
			}
		}
	}
	return "", false
}

// resumeOffset finds how much of an answer a prompt already holds: when text
// ends with the answer's first k tokens ("tok0 tok1 … tok<k-1> ", exactly as
// generated), it returns k and their length in bytes; otherwise 0, 0. What
// comes before them is any text (a prompt, a client's own prefill).
func resumeOffset(text string) (k, nbytes int) {
	body, ok := strings.CutSuffix(text, " ")
	if !ok {
		return 0, 0
	}
	i := strings.LastIndex(body, "tok")
	if i < 0 {
		return 0, 0
	}
	digits := body[i+3:]
	last, err := strconv.Atoi(digits)
	if err != nil || last < 0 || strconv.Itoa(last) != digits || last >= len(text)/5 {
		return 0, 0 // not a token, or more tokens than the text could hold (each is ≥ 5 bytes)
	}
	var want strings.Builder
	for j := 0; j <= last; j++ {
		want.WriteString(tokenText(j))
	}
	if !strings.HasSuffix(text, want.String()) {
		return 0, 0
	}
	return last + 1, want.Len()
}

func contentBytes(raw json.RawMessage) int {
	var str string
	if json.Unmarshal(raw, &str) == nil {
		return len(str)
	}
	var parts []struct {
		Text string `json:"text"`
	}
	if json.Unmarshal(raw, &parts) == nil {
		n := 0
		for _, p := range parts {
			n += len(p.Text)
		}
		return n
	}
	return 0
}

// promptTokens counts a completions "prompt": a string (bytes/4), a list of
// strings, or a list of token ids. A string prompt (or a list of one) that
// ends with the first k tokens of an answer resumes it: offset is k, and
// those tokens count one each, as the engine would count the tokens it
// generated when they come back in a prompt.
func promptTokens(raw json.RawMessage) (n, offset int, err error) {
	var str string
	if json.Unmarshal(raw, &str) == nil {
		k, nb := resumeOffset(str)
		return textTokens(len(str)-nb) + k, k, nil
	}
	var strs []string
	if json.Unmarshal(raw, &strs) == nil && len(strs) > 0 {
		if len(strs) == 1 {
			k, nb := resumeOffset(strs[0])
			return textTokens(len(strs[0])-nb) + k, k, nil
		}
		n := 0
		for _, x := range strs {
			n += len(x)
		}
		return textTokens(n), 0, nil
	}
	var ids []int64
	if json.Unmarshal(raw, &ids) == nil && len(ids) > 0 {
		return len(ids), 0, nil
	}
	var idLists [][]int64
	if json.Unmarshal(raw, &idLists) == nil && len(idLists) > 0 {
		n := 0
		for _, l := range idLists {
			n += len(l)
		}
		return max(1, n), 0, nil
	}
	return 0, 0, errors.New("'prompt' must be a string, a list of strings or a list of token ids")
}

// sequences is how many sequences a request generates, as vLLM: n per
// prompt (best_of when larger), times the prompts of a /v1/completions
// list of prompts (strings or token-id lists). The sim schedules them as
// one sequence of the scheduler and reports each one's tokens in usage.
func sequences(req genRequestBody, chat bool) (int, error) {
	n := 1
	if req.N != nil {
		if *req.N < 1 {
			return 0, errors.New("n must be at least 1")
		}
		n = *req.N
	}
	if req.BestOf != nil {
		if *req.BestOf < n {
			return 0, errors.New("best_of must be greater than or equal to n")
		}
		n = *req.BestOf
	}
	prompts := 1
	if !chat {
		var list []json.RawMessage
		if json.Unmarshal(req.Prompt, &list) == nil && len(list) > 0 && (list[0][0] == '"' || list[0][0] == '[') {
			prompts = len(list)
		}
	}
	if n*prompts > maxSequences {
		return 0, fmt.Errorf("at most %d sequences per request", maxSequences)
	}
	return n * prompts, nil
}

// maxSequences caps n × prompts (vLLM: VLLM_MAX_N_SEQUENCES, 16384).
const maxSequences = 16384

// tokenText is the deterministic text of the answer's token i (its position
// in the whole answer, counting the tokens a resumed request already holds).
func tokenText(i int) string { return "tok" + strconv.Itoa(i) + " " }

func newID(prefix string) string {
	var b [12]byte
	rand.Read(b[:])
	return prefix + hex.EncodeToString(b[:])
}

// readBody reads a JSON body and records it in Received.
func (s *Server) readBody(w http.ResponseWriter, r *http.Request) ([]byte, *Received, bool) {
	raw, err := io.ReadAll(http.MaxBytesReader(w, r.Body, 16<<20))
	rec := &Received{Time: time.Now(), Method: r.Method, Path: r.URL.Path, Header: r.Header.Clone(), RawBody: raw}
	var body map[string]any
	if err == nil {
		if json.Unmarshal(raw, &body) == nil {
			rec.Body = body
			rec.Model, _ = body["model"].(string)
			rec.Stream, _ = body["stream"].(bool)
		}
	}
	s.mu.Lock()
	s.received = append(s.received, rec)
	if over := len(s.received) - s.cfg.ReceivedLimit; over > 0 {
		s.received = append([]*Received(nil), s.received[over:]...)
	}
	s.mu.Unlock()
	if err != nil {
		s.writeError(w, rec, http.StatusBadRequest, "BadRequestError", "could not read body: %v", err)
		return nil, rec, false
	}
	if rec.Body == nil {
		s.writeError(w, rec, http.StatusBadRequest, "BadRequestError", "JSON decode error: body is not a JSON object")
		return nil, rec, false
	}
	return raw, rec, true
}

// generate serves /v1/chat/completions (chat) and /v1/completions.
func (s *Server) generate(w http.ResponseWriter, r *http.Request, chat bool) {
	raw, rec, ok := s.readBody(w, r)
	if !ok {
		return
	}
	var req genRequestBody
	if err := json.Unmarshal(raw, &req); err != nil {
		s.writeError(w, rec, http.StatusBadRequest, "BadRequestError", "invalid request: %v", err)
		return
	}
	if chat && req.ContinueFinalMessage && req.AddGenerationPrompt != nil && *req.AddGenerationPrompt {
		// vLLM's check_generation_prompt validator, before anything else.
		s.writeError(w, rec, http.StatusBadRequest, "BadRequestError", "Cannot set both `continue_final_message` and `add_generation_prompt` to True.")
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
	if req.StreamOptions != nil && !req.Stream {
		s.writeError(w, rec, http.StatusBadRequest, "BadRequestError", "Stream options can only be defined when `stream=True`.")
		return
	}
	salt, ok := s.saltOf(w, rec, req.CacheSalt, prio)
	if !ok {
		return
	}

	var nPrompt, offset int
	var promptKey []byte
	if chat {
		msgs, n, err := parseMessages(req.Messages)
		if err != nil {
			s.writeError(w, rec, http.StatusBadRequest, "BadRequestError", "%v", err)
			return
		}
		nb := 0
		if req.ContinueFinalMessage {
			if req.AddGenerationPrompt == nil {
				// The flag defaults to true; the chat template refuses the pair.
				s.writeError(w, rec, http.StatusBadRequest, "BadRequestError",
					"continue_final_message and add_generation_prompt are not compatible. Use continue_final_message when you want the model to continue the final message, and add_generation_prompt when you want to add a header that will prompt it to start a new assistant message instead.")
				return
			}
			// as vLLM (the chat template), whatever the final message's role
			text, ok := finalText(msgs[len(msgs)-1].Content)
			if !ok {
				s.writeError(w, rec, http.StatusBadRequest, "BadRequestError", "continue_final_message is set but we could not find any text to continue in the final message!")
				return
			}
			offset, nb = resumeOffset(text)
		}
		nPrompt, promptKey = textTokens(n-nb)+offset, req.Messages
	} else {
		n, k, err := promptTokens(req.Prompt)
		if err != nil {
			s.writeError(w, rec, http.StatusBadRequest, "BadRequestError", "%v", err)
			return
		}
		nPrompt, offset, promptKey = n, k, req.Prompt
	}
	seqs, err := sequences(req, chat)
	if err != nil {
		s.writeError(w, rec, http.StatusBadRequest, "BadRequestError", "%v", err)
		return
	}

	maxTokens, explicit := 0, false
	switch {
	case req.MaxCompletionTokens != nil:
		maxTokens, explicit = *req.MaxCompletionTokens, true
	case req.MaxTokens != nil:
		maxTokens, explicit = *req.MaxTokens, true
	default:
		// The simulated model stops at answer position DefaultMaxTokens: a
		// resumed request generates what is left of it (at least one token).
		maxTokens = min(max(1, s.cfg.DefaultMaxTokens-offset), s.maxLen-nPrompt)
	}
	if explicit && maxTokens < 1 {
		s.writeError(w, rec, http.StatusBadRequest, "BadRequestError", "max_tokens must be at least 1, got %d.", maxTokens)
		return
	}
	if nPrompt+maxTokens > s.maxLen || maxTokens < 1 {
		s.writeError(w, rec, http.StatusBadRequest, "BadRequestError",
			"This model's maximum context length is %d tokens. However, you requested %d tokens (%d in the messages, %d in the completion). Please reduce the length of the messages or completion.",
			s.maxLen, nPrompt+maxTokens, nPrompt, maxTokens)
		return
	}
	// Finish reason: "length" when the client set the limit, "stop" when
	// the default applied (the simulated model "chose" to stop there).
	finish := "stop"
	if explicit {
		finish = "length"
	}
	includeUsage := s.cfg.ForceIncludeUsage
	if req.StreamOptions != nil && (req.StreamOptions.IncludeUsage == nil || *req.StreamOptions.IncludeUsage) {
		includeUsage = true // vLLM: include_usage defaults to true inside stream_options
	}

	g, ok := s.enqueue(w, rec, req.Model, salt, promptKey, int(prio), nPrompt, offset, maxTokens, seqs)
	if !ok {
		return
	}
	s.log.Debug("vllmsim: queued", "seq", g.seq.ID, "model", req.Model, "priority", prio,
		"prompt_tokens", nPrompt, "max_tokens", maxTokens, "stream", req.Stream)

	created := time.Now().Unix()
	var id string
	if chat {
		id = newID("chatcmpl-")
	} else {
		id = newID("cmpl-")
	}
	if req.Stream {
		// vLLM: continuous_usage_stats puts the cumulative usage in every
		// chunk (with include_usage)
		continuous := includeUsage && req.StreamOptions != nil && req.StreamOptions.ContinuousUsageStats
		s.stream(w, r, g, chat, id, created, req.Model, finish, includeUsage, continuous)
	} else {
		s.unary(w, r, g, chat, id, created, req.Model, finish)
	}
}

// priorityOf is a request's priority: the header's when it parses as an
// int (it overrides the body, as in vLLM), else the body's, else 0. ok is
// false when it was refused (answered).
func (s *Server) priorityOf(w http.ResponseWriter, r *http.Request, rec *Received, body *int64) (prio int64, ok bool) {
	if body != nil {
		prio = *body
	}
	if h := r.Header.Get(PriorityHeader); h != "" {
		if v, err := strconv.ParseInt(strings.TrimSpace(h), 10, 64); err == nil {
			prio = v
		}
	}
	if prio > math.MaxInt32 || prio < math.MinInt32 {
		s.writeError(w, rec, http.StatusBadRequest, "BadRequestError", "priority %d out of the simulator's range", prio)
		return 0, false
	}
	s.mu.Lock()
	rec.Priority = int(prio)
	s.mu.Unlock()
	return prio, true
}

// saltOf checks a request's cache_salt (raw, absent or null = none) and
// that a non-zero priority meets a priority scheduler, as vLLM does.
func (s *Server) saltOf(w http.ResponseWriter, rec *Received, raw json.RawMessage, prio int64) (salt string, ok bool) {
	if len(raw) > 0 && string(raw) != "null" {
		if json.Unmarshal(raw, &salt) != nil || salt == "" {
			s.writeError(w, rec, http.StatusBadRequest, "BadRequestError", "Parameter 'cache_salt' must be a non-empty string if provided.")
			return "", false
		}
	}
	if prio != 0 && s.cfg.Sched.Policy != PolicyPriority {
		s.writeError(w, rec, http.StatusBadRequest, "BadRequestError", "Got priority %d but Priority scheduling is not enabled.", prio)
		return "", false
	}
	return salt, true
}

// enqueue queues a generation request for the scheduler; ok is false
// when the server is closing (answered 503).
func (s *Server) enqueue(w http.ResponseWriter, rec *Received, model, salt string, promptKey []byte, prio, nPrompt, offset, maxTokens, seqs int) (*genReq, bool) {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		s.writeError(w, rec, http.StatusServiceUnavailable, "ServiceUnavailableError", "The server is shutting down.")
		return nil, false
	}
	s.nextID++
	s.arrival++
	g := &genReq{
		seq: &Seq{ID: s.nextID, Priority: prio, Arrival: s.arrival,
			PromptTokens: nPrompt, MaxTokens: maxTokens},
		notify:   make(chan struct{}, 1),
		offset:   offset,
		seqs:     seqs,
		received: rec,
	}
	rec.SeqID = g.seq.ID
	key := salt + "\x00" + model + "\x00" + string(promptKey)
	if s.prefix[key] && nPrompt > 1 {
		// Whole blocks only, and the last prompt token is always computed.
		bs := s.cfg.Sched.BlockSize
		g.cached = (nPrompt - 1) / bs * bs
	}
	if len(s.prefix) >= 100000 {
		clear(s.prefix)
	}
	s.prefix[key] = true
	s.sched.Add(g.seq)
	s.reqs[g.seq.ID] = g
	s.stats.Served++
	s.mu.Unlock()
	notify(s.wake)
	return g, true
}

// abort removes a request whose client left.
func (s *Server) abort(g *genReq) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if g.done {
		return
	}
	g.done = true
	s.sched.Abort(g.seq.ID)
	delete(s.reqs, g.seq.ID)
	s.stats.Aborted++
	s.log.Debug("vllmsim: aborted", "seq", g.seq.ID)
}

// wait blocks until new tokens or the end; it returns the tokens generated
// so far, whether the request is done and the abort error, or ok=false when
// the client left (the request is then aborted).
func (s *Server) wait(r *http.Request, g *genReq) (gen int, done bool, errMsg string, ok bool) {
	select {
	case <-r.Context().Done():
		s.abort(g)
		return 0, true, "", false
	case <-g.notify:
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return g.gen, g.done, g.err, true
}

// waitAll waits for every token of a request that is not streamed; ok is
// false when the client left or the request failed (answered then).
func (s *Server) waitAll(w http.ResponseWriter, r *http.Request, g *genReq) (gen int, ok bool) {
	for {
		n, done, errMsg, ok := s.wait(r, g)
		if !ok {
			return 0, false
		}
		if errMsg != "" {
			s.writeError(w, g.received, http.StatusInternalServerError, "InternalServerError", "%s", errMsg)
			return 0, false
		}
		if done {
			return n, true
		}
	}
}

func (s *Server) unary(w http.ResponseWriter, r *http.Request, g *genReq, chat bool, id string, created int64, model, finish string) {
	gen, ok := s.waitAll(w, r, g)
	if !ok {
		return
	}
	text := answerText(g, gen)
	usage := makeUsage(g.seq.PromptTokens, gen*g.seqs, g.cached)
	choices := make([]any, g.seqs)
	for i := range choices {
		if chat {
			choices[i] = map[string]any{
				"index":         i,
				"message":       map[string]any{"role": "assistant", "content": text},
				"logprobs":      nil,
				"finish_reason": finish,
				"stop_reason":   nil,
			}
		} else {
			choices[i] = map[string]any{
				"index": i, "text": text, "logprobs": nil,
				"finish_reason": finish, "stop_reason": nil,
			}
		}
	}
	object := "text_completion"
	if chat {
		object = "chat.completion"
	}
	resp := map[string]any{"id": id, "object": object, "created": created, "model": model, "choices": choices, "usage": usage}
	s.mu.Lock()
	g.received.Status = http.StatusOK
	s.mu.Unlock()
	writeJSON(w, http.StatusOK, resp)
}

func (s *Server) stream(w http.ResponseWriter, r *http.Request, g *genReq, chat bool, id string, created int64, model, finish string, includeUsage, continuous bool) {
	flusher, _ := w.(http.Flusher)
	w.Header().Set("Content-Type", "text/event-stream; charset=utf-8")
	w.Header().Set("Cache-Control", "no-cache")
	w.WriteHeader(http.StatusOK)
	if flusher != nil {
		flusher.Flush()
	}
	s.mu.Lock()
	g.received.Status = http.StatusOK
	s.mu.Unlock()

	object := "text_completion"
	if chat {
		object = "chat.completion.chunk"
	}
	var buf bytes.Buffer
	send := func(v any) {
		b, _ := json.Marshal(v)
		buf.WriteString("data: ")
		buf.Write(b)
		buf.WriteString("\n\n")
	}
	sent := 0
	chunk := func(choice map[string]any) map[string]any {
		c := map[string]any{"id": id, "object": object, "created": created, "model": model,
			"choices": []any{choice}}
		if continuous {
			c["usage"] = makeUsage(g.seq.PromptTokens, sent*g.seqs, g.cached)
		}
		return c
	}
	flush := func() bool {
		if buf.Len() == 0 {
			return true
		}
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
	if chat {
		for c := range g.seqs {
			send(chunk(map[string]any{"index": c, "delta": map[string]any{"role": "assistant", "content": ""},
				"logprobs": nil, "finish_reason": nil}))
		}
		if !flush() {
			return
		}
	}
	for {
		gen, done, errMsg, ok := s.wait(r, g)
		if !ok {
			return
		}
		for sent < gen {
			tok := tokenText(g.offset + sent)
			sent++ // counted in this chunk's continuous usage
			for c := range g.seqs {
				if chat {
					send(chunk(map[string]any{"index": c, "delta": map[string]any{"content": tok},
						"logprobs": nil, "finish_reason": nil}))
				} else {
					send(chunk(map[string]any{"index": c, "text": tok, "logprobs": nil, "finish_reason": nil}))
				}
			}
		}
		if errMsg != "" {
			send(errorBody{Error: errorInfo{Message: errMsg, Type: "InternalServerError", Code: http.StatusInternalServerError}})
			buf.WriteString("data: [DONE]\n\n")
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
	for c := range g.seqs {
		if chat {
			send(chunk(map[string]any{"index": c, "delta": map[string]any{}, "logprobs": nil,
				"finish_reason": finish, "stop_reason": nil}))
		} else {
			send(chunk(map[string]any{"index": c, "text": "", "logprobs": nil,
				"finish_reason": finish, "stop_reason": nil}))
		}
	}
	if includeUsage {
		send(map[string]any{"id": id, "object": object, "created": created, "model": model,
			"choices": []any{}, "usage": makeUsage(g.seq.PromptTokens, sent*g.seqs, g.cached)})
	}
	buf.WriteString("data: [DONE]\n\n")
	flush()
}

// embeddings answers at once with deterministic unit vectors.
func (s *Server) embeddings(w http.ResponseWriter, r *http.Request) {
	raw, rec, ok := s.readBody(w, r)
	if !ok {
		return
	}
	var req struct {
		Model string          `json:"model"`
		Input json.RawMessage `json:"input"`
	}
	if err := json.Unmarshal(raw, &req); err != nil {
		s.writeError(w, rec, http.StatusBadRequest, "BadRequestError", "invalid request: %v", err)
		return
	}
	if !s.models[req.Model] {
		s.writeError(w, rec, http.StatusNotFound, "NotFoundError", "The model `%s` does not exist.", req.Model)
		return
	}
	var inputs []string
	var one string
	switch {
	case json.Unmarshal(req.Input, &one) == nil:
		inputs = []string{one}
	case json.Unmarshal(req.Input, &inputs) == nil && len(inputs) > 0:
	default:
		inputs = nil
		var ids [][]int64
		var flat []int64
		if json.Unmarshal(req.Input, &flat) == nil && len(flat) > 0 {
			ids = [][]int64{flat}
		} else if json.Unmarshal(req.Input, &ids) != nil || len(ids) == 0 {
			s.writeError(w, rec, http.StatusBadRequest, "BadRequestError", "'input' must be a string, a list of strings or token ids")
			return
		}
		for _, t := range ids {
			inputs = append(inputs, fmt.Sprint(t))
		}
	}
	data := make([]any, len(inputs))
	total := 0
	for i, in := range inputs {
		total += textTokens(len(in))
		data[i] = map[string]any{"object": "embedding", "index": i, "embedding": embed(in)}
	}
	s.mu.Lock()
	s.stats.Served++
	s.stats.PromptTokens += int64(total)
	rec.Status = http.StatusOK
	s.mu.Unlock()
	writeJSON(w, http.StatusOK, map[string]any{
		"id": newID("embd-"), "object": "list", "created": time.Now().Unix(), "model": req.Model, "data": data,
		"usage": usageInfo{PromptTokens: total, TotalTokens: total},
	})
}

// embed is a deterministic 8-dimensional unit vector derived from text.
func embed(text string) []float64 {
	v := make([]float64, 8)
	var norm float64
	for i := range v {
		h := fnv.New64a()
		h.Write([]byte{byte(i)})
		h.Write([]byte(text))
		x := float64(h.Sum64()%2001)/1000 - 1
		v[i] = x
		norm += x * x
	}
	norm = math.Sqrt(norm)
	if norm == 0 {
		norm = 1
	}
	for i := range v {
		v[i] = math.Round(v[i]/norm*1e6) / 1e6
	}
	return v
}

var startTime = time.Now().Unix()

func (s *Server) listModels(w http.ResponseWriter, r *http.Request) {
	data := make([]any, len(s.cfg.Models))
	for i, m := range s.cfg.Models {
		data[i] = s.modelCard(m)
	}
	writeJSON(w, http.StatusOK, map[string]any{"object": "list", "data": data})
}

// modelCard is vLLM's ModelCard of a served model.
func (s *Server) modelCard(m string) map[string]any {
	return map[string]any{
		"id": m, "object": "model", "created": startTime, "owned_by": "vllm",
		"root": m, "parent": nil, "max_model_len": s.maxLen, "permission": []any{},
	}
}

// registerMetrics exposes vLLM's metric names from a private registry, with
// labels model_name (the first served name) and engine="0".
func (s *Server) registerMetrics() {
	s.reg = prometheus.NewRegistry()
	labels := prometheus.Labels{"model_name": s.cfg.Models[0], "engine": "0"}
	read := func(f func(st *Stats) float64) func() float64 {
		return func() float64 {
			st := s.Stats()
			return f(&st)
		}
	}
	s.reg.MustRegister(
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "vllm:num_requests_running",
			Help: "Number of requests in model execution batches.", ConstLabels: labels},
			read(func(st *Stats) float64 { return float64(st.Running) })),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "vllm:num_requests_waiting",
			Help: "Number of requests waiting to be processed.", ConstLabels: labels},
			read(func(st *Stats) float64 { return float64(st.Waiting) })),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "vllm:kv_cache_usage_perc",
			Help: "KV-cache usage. 1 means 100 percent usage.", ConstLabels: labels},
			read(func(st *Stats) float64 { return st.KVUsage })),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "vllm:num_preemptions_total",
			Help: "Cumulative number of preemption from the engine.", ConstLabels: labels},
			read(func(st *Stats) float64 { return float64(st.Preemptions) })),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "vllm:prompt_tokens_total",
			Help: "Number of prefill tokens processed.", ConstLabels: labels},
			read(func(st *Stats) float64 { return float64(st.PromptTokens) })),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "vllm:generation_tokens_total",
			Help: "Number of generation tokens processed.", ConstLabels: labels},
			read(func(st *Stats) float64 { return float64(st.GenerationTokens) })),
	)
}

// tokenize answers vLLM's POST /tokenize: {"model", "prompt"} or {"model",
// "messages"} (the chat template applied) gives {"count", "max_model_len",
// "tokens"}, the prompt tokens the sim counts for a generation request with
// that prompt. Like vLLM's other root routes it is outside --api-key.
func (s *Server) tokenize(w http.ResponseWriter, r *http.Request) {
	var req struct {
		Model    string          `json:"model"`
		Prompt   json.RawMessage `json:"prompt"`
		Messages json.RawMessage `json:"messages"`
	}
	if err := json.NewDecoder(io.LimitReader(r.Body, 16<<20)).Decode(&req); err != nil {
		writeJSON(w, http.StatusBadRequest, errorBody{Error: errorInfo{Message: "invalid request: " + err.Error(), Type: "BadRequestError", Code: http.StatusBadRequest}})
		return
	}
	var n int
	switch {
	case len(req.Messages) > 0:
		_, bytes, err := parseMessages(req.Messages)
		if err != nil {
			writeJSON(w, http.StatusBadRequest, errorBody{Error: errorInfo{Message: err.Error(), Type: "BadRequestError", Code: http.StatusBadRequest}})
			return
		}
		n = textTokens(bytes)
	default:
		count, _, err := promptTokens(req.Prompt)
		if err != nil {
			writeJSON(w, http.StatusBadRequest, errorBody{Error: errorInfo{Message: err.Error(), Type: "BadRequestError", Code: http.StatusBadRequest}})
			return
		}
		n = count
	}
	tokens := make([]int, n)
	for i := range tokens {
		tokens[i] = i
	}
	writeJSON(w, http.StatusOK, map[string]any{"count": n, "max_model_len": s.maxLen, "tokens": tokens})
}

package gateway

import (
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"strconv"
	"time"

	"github.com/go-llmflow/llmflow"
)

// errorKind says how one error code is presented to a client.
type errorKind struct {
	status int
	typ    string // OpenAI error type
	code   string // OpenAI error code
}

var errorKinds = map[string]errorKind{
	llmflow.EINVALID:      {http.StatusBadRequest, "invalid_request_error", "invalid_request"},
	llmflow.EUNAUTHORIZED: {http.StatusUnauthorized, "authentication_error", "invalid_api_key"},
	llmflow.EFORBIDDEN:    {http.StatusForbidden, "permission_error", "forbidden"},
	llmflow.ENOTFOUND:     {http.StatusNotFound, "invalid_request_error", "not_found"},
	llmflow.ECONFLICT:     {http.StatusConflict, "invalid_request_error", "conflict"},
	llmflow.ETOOLARGE:     {http.StatusRequestEntityTooLarge, "invalid_request_error", "request_too_large"},
	llmflow.ERATELIMIT:    {http.StatusTooManyRequests, "rate_limit_error", "rate_limit_exceeded"},
	llmflow.EUNAVAILABLE:  {http.StatusServiceUnavailable, "server_error", "service_unavailable"},
	llmflow.EUPSTREAM:     {http.StatusBadGateway, "server_error", "upstream_error"},
	llmflow.ETIMEOUT:      {http.StatusGatewayTimeout, "server_error", "upstream_timeout"},
	llmflow.EINTERNAL:     {http.StatusInternalServerError, "server_error", "internal_error"},
	emethod:               {http.StatusMethodNotAllowed, "invalid_request_error", "method_not_allowed"},
	equota:                {http.StatusTooManyRequests, "insufficient_quota", "insufficient_quota"},
}

// emethod is an error kind of the HTTP layer alone: a route called with
// a method it does not serve.
const emethod = "method_not_allowed"

// equota is an exhausted budget that nothing in flight can give back
// before its period ends: OpenAI's insufficient_quota, which retrying
// does not help (noRetry).
const equota = "insufficient_quota"

// retryAfter is attached to errors that tell the client when to come back.
type retryAfter struct {
	err   error
	after time.Duration
}

func (r *retryAfter) Error() string { return r.err.Error() }
func (r *retryAfter) Unwrap() error { return r.err }

// withRetryAfter wraps err so that writeError sets a Retry-After header.
func withRetryAfter(err error, d time.Duration) error { return &retryAfter{err: err, after: d} }

// noRetry is attached to errors that retrying soon cannot help:
// writeError sets x-should-retry: false, which the OpenAI SDKs honour
// (they retry a 429 otherwise).
type noRetry struct{ err error }

func (r *noRetry) Error() string { return r.err.Error() }
func (r *noRetry) Unwrap() error { return r.err }

// statusOf is the HTTP status writeError uses for err.
func statusOf(err error) int {
	k, ok := errorKinds[llmflow.ErrorCode(err)]
	if !ok {
		return http.StatusInternalServerError
	}
	return k.status
}

// writeError is the one place where errors become HTTP responses: an
// OpenAI-shaped body with the public message only. Internal errors are
// logged with their cause and answered with a generic message.
func writeError(w http.ResponseWriter, log *slog.Logger, err error) {
	code := llmflow.ErrorCode(err)
	k, ok := errorKinds[code]
	if !ok {
		k = errorKinds[llmflow.EINTERNAL]
	}
	msg := llmflow.ErrorMessage(err)
	var param string
	var le *llmflow.Error
	if errors.As(err, &le) {
		param = le.Param
	}
	if code == llmflow.EINTERNAL || code == llmflow.EUPSTREAM || code == llmflow.EUNAVAILABLE || code == llmflow.ETIMEOUT {
		if log != nil {
			// inference routes set X-Request-Id first: the warning names the request
			log.Warn("request failed", "request_id", w.Header().Get("X-Request-Id"), "code", code, "err", err)
		}
	}
	var ra *retryAfter
	if errors.As(err, &ra) && ra.after > 0 {
		secs := int((ra.after + time.Second - 1) / time.Second)
		w.Header().Set("Retry-After", strconv.Itoa(secs))
	}
	var nr *noRetry
	if errors.As(err, &nr) {
		w.Header().Set("X-Should-Retry", "false")
	}
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(k.status)
	body := errorBody{Error: errorDetail{Message: msg, Type: k.typ, Code: k.code}}
	if param != "" {
		body.Error.Param = &param
	}
	b, _ := json.Marshal(body)
	w.Write(append(b, '\n'))
}

// errorBody is OpenAI's error shape: {"error":{"message","type","param","code"}}.
type errorBody struct {
	Error errorDetail `json:"error"`
}

type errorDetail struct {
	Message string  `json:"message"`
	Type    string  `json:"type"`
	Param   *string `json:"param"`
	Code    string  `json:"code"`
}

// Package sse is the server-sent events codec of the gateway: it relays an
// OpenAI-style stream (vLLM, llama-server) from an io.Reader to an io.Writer
// event by event, and reports what went through: the usage, whether the
// stream ended on [DONE], whether an error event passed.
//
// Reader splits a stream into events; Copy forwards them byte for byte,
// dropping the final usage chunk when the client did not ask for it;
// ParseUsage reads the usage of a non-streaming answer.
//
// The package does no network I/O and does not import net/http: flushing
// the response is the caller's job, through Options.Flush. It sits on the
// gateway's hot path, so ordinary content chunks are classified with byte
// searches, without JSON decoding and without allocating.
package sse

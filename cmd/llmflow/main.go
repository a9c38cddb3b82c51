// Command llmflow is the llmflow gateway: an OpenAI-compatible front for
// vLLM and other engines that shares a GPU cluster fairly between
// institutions. See `llmflow --help`.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"
)

// main runs the command; SIGINT and SIGTERM cancel its context, so serve
// shuts down gracefully and flushes the accounting queue. serve handles
// SIGHUP itself (a configuration reload).
func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := Run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

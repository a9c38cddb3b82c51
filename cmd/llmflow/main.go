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

// main runs the command; SIGINT, SIGTERM and SIGHUP (there is no reload
// yet) all cancel its context, so serve shuts down gracefully and flushes
// the accounting queue.
func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM, syscall.SIGHUP)
	code := Run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

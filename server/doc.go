// Package server is llmflow's process host: it runs the gateway for a
// configuration on a listener (TLS when configured) and keeps what
// outlives a configuration reload: the store, the accounting queue and its
// on-disk spool, and the state shared with other replicas (Redis). A
// generation is what one reading of the configuration builds: the
// gateway, the Slurm import, the write-back to slurmdbd and the alert
// dispatcher; a reload starts a new generation on the same listener and
// connections and stops the old one once it is replaced. Shutdown drains:
// the listener closes, open connections are answered with
// "Connection: close", in-flight requests and streams finish, fair-share
// usage is saved and the accounting queue written.
//
// The command (cmd/llmflow) parses flags, turns SIGHUP into Options.Reload
// and calls Run; end-to-end tests call Run too.
package server

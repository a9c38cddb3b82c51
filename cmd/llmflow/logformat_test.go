package main

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"github.com/spf13/cobra"
)

// TestLogFormat: --log-format (or LLMFLOW_LOG_FORMAT) picks text or JSON
// lines; anything else is refused.
func TestLogFormat(t *testing.T) {
	run := func(args ...string) (string, error) {
		var stderr bytes.Buffer
		e := newEnv(&bytes.Buffer{}, &stderr)
		cmd := &cobra.Command{Use: "serve"}
		e.logFlags(cmd, "info")
		if err := cmd.ParseFlags(args); err != nil {
			t.Fatal(err)
		}
		log, err := e.logger(cmd)
		if err != nil {
			return "", err
		}
		log.Info("request", "request_id", "r1")
		e.flushLogs() // info lines are buffered until the command ends (or 100 ms)
		return stderr.String(), nil
	}
	if out, err := run(); err != nil || !strings.Contains(out, "level=INFO msg=request request_id=r1") {
		t.Errorf("default: %q, %v; want text", out, err)
	}
	out, err := run("--log-format", "json")
	var m map[string]any
	if err != nil || json.Unmarshal([]byte(out), &m) != nil || m["request_id"] != "r1" {
		t.Errorf("--log-format json: %q, %v", out, err)
	}
	t.Setenv("LLMFLOW_LOG_FORMAT", "json")
	if out, err := run(); err != nil || !strings.HasPrefix(out, "{") {
		t.Errorf("LLMFLOW_LOG_FORMAT=json: %q, %v", out, err)
	}
	if _, err := run("--log-format", "xml"); err == nil || !strings.Contains(err.Error(), "--log-format") {
		t.Errorf("--log-format xml: %v, want an error", err)
	}
}

//go:build unix

package config_test

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/go-llmflow/llmflow/config"
)

// A FIFO (or a device) named by mistake: refused at once, where
// opening it blocked check-config and serve until a writer came.
func TestReadSecret_ErrFIFO(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(p, 0o600); err != nil {
		t.Skipf("mkfifo: %v", err)
	}
	done := make(chan error, 1)
	go func() { _, err := config.ReadSecret(p); done <- err }()
	select {
	case err := <-done:
		if err == nil || !strings.Contains(err.Error(), "not a regular file") {
			t.Errorf("err = %v, want not a regular file", err)
		}
	case <-time.After(5 * time.Second):
		os.WriteFile(p, []byte("x"), 0o600) // unblock the reader
		t.Fatal("ReadSecret blocks on a FIFO")
	}
}

package redisstate

import (
	"bytes"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-llmflow/llmflow/config"
)

// lockedBuffer is a log destination safe for the Shared's goroutines.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// TestOpenPasswordNotNeeded: a password_file against a Redis that answers
// without a password is logged as an error (go-redis itself accepts
// Redis's refusal of AUTH silently); against a Redis that requires it,
// nothing is said and the counters answer.
func TestOpenPasswordNotNeeded(t *testing.T) {
	const password = "0123456789abcdef0123456789abcdef"
	pwFile := filepath.Join(t.TempDir(), "redis.password")
	if err := os.WriteFile(pwFile, []byte(password+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name     string
		args     []string // redis-server's
		wantWarn bool
	}{
		{"PasswordlessRedis", nil, true},
		{"RequirePass", []string{"--requirepass", password}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := startOwnRedis(t, "", tc.args...)
			var logs lockedBuffer
			sh, err := Open(t.Context(), config.Redis{Address: r.addr(), PasswordFile: pwFile, KeyPrefix: "llmflow-test:", Timeout: time.Second, Replicas: 1},
				time.Minute, slog.New(slog.NewTextHandler(&logs, nil)))
			if err != nil {
				t.Fatal(err)
			}
			defer sh.Close()
			if err := sh.Client().Ping(t.Context()).Err(); err != nil {
				t.Fatalf("ping with the password: %v", err)
			}
			warned := strings.Contains(logs.String(), "password_file protects nothing")
			if warned != tc.wantWarn {
				t.Errorf("warned %v, want %v; logs:\n%s", warned, tc.wantWarn, logs.String())
			}
			if strings.Contains(logs.String(), password) {
				t.Errorf("the log shows the password:\n%s", logs.String())
			}
		})
	}
}

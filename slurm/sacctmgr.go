package slurm

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os/exec"
	"strings"
	"time"
)

// DefaultTimeout bounds one sacctmgr command when Sacctmgr.Timeout is 0.
const DefaultTimeout = 2 * time.Minute

// Sacctmgr runs Slurm's sacctmgr command. The zero value runs "sacctmgr"
// from PATH with DefaultTimeout per command. Modifying commands need a
// Slurm administrator (root, SlurmUser or AdminLevel=Operator or higher)
// on a host whose slurm.conf names slurmdbd (munge).
type Sacctmgr struct {
	// Path of the sacctmgr binary; default "sacctmgr" (looked up in PATH).
	Path string
	// Timeout bounds one command; default DefaultTimeout.
	Timeout time.Duration
}

// path returns the command run.
func (s Sacctmgr) path() string { return cmp.Or(s.Path, "sacctmgr") }

// String describes the command for logs.
func (s Sacctmgr) String() string { return s.path() }

// Output runs sacctmgr with args (a listing such as
// "--parsable2 show assoc …") and returns its standard output. Errors name
// the command line and carry the start of its standard error: sacctmgr
// missing, timed out, cancelled (wrapping ctx's error) or failed (exit
// status and message).
func (s Sacctmgr) Output(ctx context.Context, args ...string) ([]byte, error) {
	stdout, _, err := s.run(ctx, args, false)
	return stdout, err
}

// Modify runs a command that changes the association tree ("add account
// …", "modify user …") with -i, which commits at once instead of asking.
// sacctmgr's "Nothing new added" (everything to add exists already, exit
// status 1) is not an error.
func (s Sacctmgr) Modify(ctx context.Context, args ...string) error {
	_, out, err := s.run(ctx, append([]string{"-i"}, args...), true)
	if err != nil && strings.Contains(out, "Nothing new added") {
		return nil
	}
	return err
}

// maxMessage bounds the output kept for an error message.
const maxMessage = 2048

// run runs sacctmgr once and returns its stdout and the (bounded, trimmed)
// message it printed: its stderr, or with combined both streams (stdout is
// then not returned).
func (s Sacctmgr) run(ctx context.Context, args []string, combined bool) (stdout []byte, msg string, err error) {
	timeout := cmp.Or(s.Timeout, DefaultTimeout)
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	path := s.path()
	cmdline := path + " " + strings.Join(args, " ")
	cmd := exec.CommandContext(ctx, path, args...)
	var out, msgBuf bytes.Buffer
	msgW := &limitedBuffer{b: &msgBuf, n: maxMessage}
	cmd.Stdout, cmd.Stderr = &out, msgW
	if combined {
		// sacctmgr prints some refusals ("Nothing new added") on stdout.
		cmd.Stdout = msgW
	}
	cmd.WaitDelay = 2 * time.Second
	err = cmd.Run()
	msg = strings.TrimSpace(msgBuf.String())
	if err == nil {
		return out.Bytes(), msg, nil
	}
	switch {
	case errors.Is(err, exec.ErrNotFound) || errors.Is(err, fs.ErrNotExist):
		return nil, msg, fmt.Errorf("sacctmgr: %s not found (install Debian's slurm-client or set the sacctmgr path): %w", path, err)
	case errors.Is(ctx.Err(), context.DeadlineExceeded):
		return nil, msg, fmt.Errorf("sacctmgr: %s: timed out after %s%s", cmdline, timeout, suffix(msg))
	case ctx.Err() != nil:
		return nil, msg, fmt.Errorf("sacctmgr: %s: %w", cmdline, ctx.Err())
	}
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		m := msg
		if m == "" {
			m = "no error output"
		}
		return nil, msg, fmt.Errorf("sacctmgr: %s: %s: %s", cmdline, ee.ProcessState, m)
	}
	return nil, msg, fmt.Errorf("sacctmgr: %s: %w", cmdline, err)
}

func suffix(msg string) string {
	if msg == "" {
		return ""
	}
	return ": " + msg
}

// limitedBuffer keeps the first n bytes written and discards the rest.
type limitedBuffer struct {
	b *bytes.Buffer
	n int
}

func (w *limitedBuffer) Write(p []byte) (int, error) {
	if room := w.n - w.b.Len(); room > 0 {
		if len(p) > room {
			w.b.Write(p[:room])
		} else {
			w.b.Write(p)
		}
	}
	return len(p), nil
}

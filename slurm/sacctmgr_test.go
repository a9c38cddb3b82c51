package slurm_test

import (
	"context"
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/go-llmflow/llmflow/slurm"
)

// fake returns a Sacctmgr running this test binary as sacctmgr in mode.
func fake(t *testing.T, mode string) slurm.Sacctmgr {
	t.Setenv("FAKE_SACCTMGR", mode)
	return slurm.Sacctmgr{Path: os.Args[0]}
}

func TestSacctmgr_Output(t *testing.T) {
	out, err := fake(t, "echo").Output(context.Background(), "--parsable2", "show", "assoc")
	if err != nil {
		t.Fatal(err)
	}
	if got := string(out); got != "--parsable2 show assoc\n" {
		t.Errorf("stdout %q", got)
	}
}

func TestSacctmgr_Modify(t *testing.T) {
	// Modify passes -i first; its output is not an error.
	if err := fake(t, "echo").Modify(context.Background(), "add", "account", "a"); err != nil {
		t.Fatal(err)
	}
	if err := fake(t, "nothing-new").Modify(context.Background(), "add", "account", "a"); err != nil {
		t.Errorf("Nothing new added: %v, want nil", err)
	}
}

func TestSacctmgr_Errors(t *testing.T) {
	ctx := context.Background()
	for _, c := range []struct {
		name, mode string
		modify     bool
		want       []string // substrings of the error
		not        []string
	}{
		{name: "OutputFailure", mode: "fail",
			want: []string{"sacctmgr: " + os.Args[0] + " show assoc: exit status 1: Unknown field 'normshares'"},
			not:  []string{"some output", "\n"}},
		{name: "ModifyFailure", mode: "fail", modify: true,
			want: []string{os.Args[0] + " -i show assoc: exit status 1: some output", "Unknown field 'normshares'"}},
		{name: "ModifyRefusalOnStdout", mode: "refuse-stdout", modify: true,
			want: []string{"exit status 1: This cluster llm already exists.  Not adding."}},
		{name: "OutputRefusalOnStdout", mode: "nothing-new",
			want: []string{"exit status 1: no error output"}},
		{name: "NoMessage", mode: "silent-fail",
			want: []string{"exit status 3: no error output"}},
		{name: "MessageBounded", mode: "noisy-fail",
			want: []string{"exit status 1: xxx"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			s := fake(t, c.mode)
			var err error
			if c.modify {
				err = s.Modify(ctx, "show", "assoc")
			} else {
				_, err = s.Output(ctx, "show", "assoc")
			}
			if err == nil {
				t.Fatal("no error")
			}
			for _, w := range c.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q: want %q", err, w)
				}
			}
			for _, n := range c.not {
				if strings.Contains(err.Error(), n) {
					t.Errorf("error %q: contains %q", err, n)
				}
			}
			if len(err.Error()) > 4096 {
				t.Errorf("error of %d bytes: the message is not bounded", len(err.Error()))
			}
		})
	}
}

func TestSacctmgr_NotFound(t *testing.T) {
	for _, path := range []string{"/nonexistent/sacctmgr", "no-such-sacctmgr-binary"} {
		for _, modify := range []bool{false, true} {
			s := slurm.Sacctmgr{Path: path}
			var err error
			if modify {
				err = s.Modify(context.Background(), "add", "cluster", "x")
			} else {
				_, err = s.Output(context.Background(), "show", "cluster")
			}
			if err == nil || !strings.Contains(err.Error(), path+" not found (install Debian's slurm-client") {
				t.Errorf("%s (modify %v): error %v", path, modify, err)
			}
		}
	}
}

func TestSacctmgr_Timeout(t *testing.T) {
	s := fake(t, "sleep")
	s.Timeout = 300 * time.Millisecond
	start := time.Now()
	err := s.Modify(context.Background(), "add", "cluster", "x")
	if err == nil || !strings.Contains(err.Error(), "timed out after 300ms") {
		t.Errorf("error %v", err)
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Errorf("took %s", d)
	}
}

func TestSacctmgr_Cancel(t *testing.T) {
	s := fake(t, "sleep")
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(200*time.Millisecond, cancel)
	start := time.Now()
	_, err := s.Output(ctx, "show", "assoc")
	if !errors.Is(err, context.Canceled) {
		t.Errorf("error %v, want context.Canceled", err)
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Errorf("took %s", d)
	}
}

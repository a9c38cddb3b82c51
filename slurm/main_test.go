package slurm_test

import (
	"fmt"
	"os"
	"strings"
	"testing"
	"time"
)

// TestMain lets the test binary act as a fake sacctmgr (the helper-process
// pattern): a test runs os.Args[0] with FAKE_SACCTMGR set.
func TestMain(m *testing.M) {
	if mode := os.Getenv("FAKE_SACCTMGR"); mode != "" {
		os.Exit(fakeSacctmgr(mode, os.Args[1:]))
	}
	os.Exit(m.Run())
}

// fakeSacctmgr prints its arguments on stdout, then behaves as mode says.
func fakeSacctmgr(mode string, args []string) int {
	switch mode {
	case "echo":
		fmt.Println(strings.Join(args, " "))
		return 0
	case "fail":
		fmt.Println("some output")
		fmt.Fprint(os.Stderr, " Unknown field 'normshares'\n\n")
		return 1
	case "nothing-new": // what sacctmgr -i add account prints when all exist
		fmt.Println(" Nothing new added.")
		return 1
	case "refuse-stdout":
		fmt.Println(" This cluster llm already exists.  Not adding.")
		return 1
	case "silent-fail":
		return 3
	case "noisy-fail":
		fmt.Fprint(os.Stderr, strings.Repeat("x", 1<<20))
		return 1
	case "sleep":
		time.Sleep(time.Minute)
		return 0
	}
	fmt.Fprintln(os.Stderr, "fake sacctmgr: unknown mode", mode)
	return 2
}

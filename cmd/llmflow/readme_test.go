package main

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/hclsyntax"
	"github.com/spf13/cobra"

	"github.com/go-llmflow/llmflow/config"
	"github.com/go-llmflow/llmflow/reports"
)

// The README's snippets are checked so that it cannot drift from the code
// (TestREADME):
//
//   - Every ```hcl block is parsed with config.Parse. A block that declares a
//     `model` is a whole configuration and must parse as it is. Any other
//     block is a fragment (a `pool`, `slurm`, `store` or `writeback` block
//     shown on its own) and is completed before it is parsed: the blocks it
//     lacks among `org` (one org with share 1 and one team), `pool`
//     (capacity 16) and `model` (on the fragment's first pool, one upstream)
//     are appended after it. Each block is parsed as "README.md" preceded by
//     as many empty lines as precede it there, so diagnostics name the
//     README's own lines.
//   - Every `llmflow …` command (a line of a ```sh block, an inline
//     `llmflow …` code span, `go run ./cmd/llmflow …` alike) is
//     substituted (readmeSubstitutions), split like a shell would (quotes,
//     `\` continuations; a trailing `# comment` and a `> file` redirection
//     are dropped) and checked against the real command tree: newRoot().Find
//     the subcommand, ParseFlags its arguments, then its positional
//     arguments, required flags and flag groups are validated (`report`,
//     which parses its own arguments, goes through reportOptions and
//     reports.ParseArgs). `check-config` and `version` are then run for
//     real on the substituted files. `sync --to-slurmdbd` without --gpus
//     needs a pool with gpus in the configuration it names. An inline span
//     naming a bare subcommand (`llmflow report` in prose) only needs the
//     subcommand to exist.
//
// readmeSubstitutions is the substitution table: a command argument equal to
// a key (or, for flags written --flag=value, a value equal to one) is
// replaced by its value. Its entries: the main configuration (the README's
// first whole ```hcl configuration, written to a temporary directory with
// /etc/llmflow/ and /var/lib/llmflow/ replaced by that directory, where
// every secret file it names is created, mode 0600, with 64 characters),
// the example configuration, and files whose content does not matter to a
// dry validation.
func readmeSubstitutions(t *testing.T, mainConfig string) map[string]string {
	dir := filepath.Dir(mainConfig)
	empty := filepath.Join(dir, "empty-file")
	if err := os.WriteFile(empty, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	return map[string]string{
		"/etc/llmflow/gateway.hcl":     mainConfig,                   // the README's main configuration
		"gateway.hcl":                  mainConfig,                   // the same, as `llmflow share -c gateway.hcl` names it
		"examples/gateway.hcl":         "../../examples/gateway.hcl", // the repository's example, as it is
		"/etc/llmflow/slurmdbd-rw.dsn": filepath.Join(dir, "slurmdbd-rw.dsn"),
		"assoc.psv":                    empty,                             // sacctmgr output: only parsed when run
		"llmf-…":                       "llmf-" + strings.Repeat("0", 64), // a client key
		"0.0.0.0:8080":                 "127.0.0.1:0",                     // never bind all interfaces in a test
		"/var/lib/llmflow/llmflow.db":  filepath.Join(dir, "llmflow.db"),
		"/etc/llmflow/master.key":      filepath.Join(dir, "master.key"),
		"/etc/llmflow/slurmdbd.dsn":    filepath.Join(dir, "slurmdbd.dsn"),
	}
}

// readmeSnippet is a fenced block or an inline code span of README.md.
type readmeSnippet struct {
	line int    // 1-based line of its first content line in README.md
	lang string // the fence's info string; "inline" for a code span
	text string
}

// readmeSnippets returns every fenced block and every inline `llmflow …`
// code span of the README.
func readmeSnippets(t *testing.T, readme []byte) []readmeSnippet {
	var out []readmeSnippet
	inline := regexp.MustCompile("`((?:go run \\./cmd/)?llmflow [^`]+)`")
	sc := bufio.NewScanner(bytes.NewReader(readme))
	var cur *readmeSnippet
	var body strings.Builder
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		trimmed := strings.TrimSpace(line)
		switch {
		case cur == nil && strings.HasPrefix(trimmed, "```"):
			cur = &readmeSnippet{line: n + 1, lang: strings.TrimSpace(strings.TrimPrefix(trimmed, "```"))}
			body.Reset()
		case cur != nil && trimmed == "```":
			cur.text = body.String()
			out = append(out, *cur)
			cur = nil
		case cur != nil:
			body.WriteString(line)
			body.WriteByte('\n')
		default:
			for _, m := range inline.FindAllStringSubmatch(line, -1) {
				out = append(out, readmeSnippet{line: n, lang: "inline", text: m[1]})
			}
		}
	}
	if cur != nil {
		t.Fatalf("README.md:%d: fenced block never closed", cur.line-1)
	}
	return out
}

// completeHCL returns src, a fragment, followed by the org, pool and model
// blocks it lacks (see TestREADME); a src declaring a model is returned as
// it is.
func completeHCL(src []byte) ([]byte, error) {
	f, diags := hclsyntax.ParseConfig(src, "README.md", hcl.InitialPos)
	if diags.HasErrors() {
		return nil, diags
	}
	has := map[string]bool{}
	pool := ""
	for _, b := range f.Body.(*hclsyntax.Body).Blocks {
		has[b.Type] = true
		if b.Type == "pool" && pool == "" && len(b.Labels) == 1 {
			pool = b.Labels[0]
		}
	}
	if has["model"] {
		return src, nil
	}
	var buf bytes.Buffer
	buf.Write(src)
	buf.WriteString("\n# completed by readme_test.go\n")
	if !has["org"] {
		buf.WriteString("org \"readme-org\" {\n  share = 1\n  team \"readme-team\" {}\n}\n")
	}
	if pool == "" {
		pool = "readme-pool"
		buf.WriteString("pool \"readme-pool\" {\n  capacity = 16\n}\n")
	}
	fmt.Fprintf(&buf, "model \"readme-model\" {\n  pool = %q\n  upstream \"u\" {\n    base_url = \"http://127.0.0.1:8000\"\n  }\n}\n", pool)
	return buf.Bytes(), nil
}

// shellWords splits a command line as sh would for the README's commands:
// single and double quotes, a trailing comment and `> file` dropped.
// "…" and "..." placeholders (in prose) are dropped too.
func shellWords(line string) ([]string, error) {
	var words []string
	var w strings.Builder
	inWord := false
	var quote rune
	for _, r := range line {
		switch {
		case quote != 0:
			if r == quote {
				quote = 0
			} else {
				w.WriteRune(r)
			}
		case r == '\'' || r == '"':
			quote, inWord = r, true
		case r == '#' && !inWord: // a comment to the end of the line
			return finishWords(words, "", false)
		case r == ' ' || r == '\t':
			if inWord {
				words = append(words, w.String())
				w.Reset()
				inWord = false
			}
		default:
			w.WriteRune(r)
			inWord = true
		}
	}
	if quote != 0 {
		return nil, fmt.Errorf("unterminated %c quote", quote)
	}
	return finishWords(words, w.String(), inWord)
}

func finishWords(words []string, last string, inWord bool) ([]string, error) {
	if inWord {
		words = append(words, last)
	}
	var out []string
	for i := 0; i < len(words); i++ {
		switch words[i] {
		case ">", ">>", "2>":
			i++ // the redirection's file
		case "…", "...":
		default:
			out = append(out, words[i])
		}
	}
	return out, nil
}

// readmeCommands returns the llmflow commands of a snippet, each as its
// arguments after the program name, with \-continuations joined.
func readmeCommands(s readmeSnippet) ([][]string, error) {
	if s.lang != "inline" && s.lang != "sh" {
		return nil, nil
	}
	var cmds [][]string
	lines := strings.Split(s.text, "\n")
	for i := 0; i < len(lines); i++ {
		line := strings.TrimSpace(lines[i])
		for strings.HasSuffix(line, "\\") && i+1 < len(lines) {
			i++
			line = strings.TrimSuffix(line, "\\") + " " + strings.TrimSpace(lines[i])
		}
		var rest string
		switch {
		case strings.HasPrefix(line, "llmflow "):
			rest = strings.TrimPrefix(line, "llmflow ")
		case strings.HasPrefix(line, "go run ./cmd/llmflow "):
			rest = strings.TrimPrefix(line, "go run ./cmd/llmflow ")
		default:
			continue
		}
		words, err := shellWords(rest)
		if err != nil {
			return nil, fmt.Errorf("%q: %v", line, err)
		}
		if len(words) > 0 {
			cmds = append(cmds, words)
		}
	}
	return cmds, nil
}

// substitute applies the substitution table to args.
func substitute(args []string, subs map[string]string) []string {
	out := make([]string, len(args))
	for i, a := range args {
		if v, ok := subs[a]; ok {
			a = v
		} else if name, val, ok := strings.Cut(a, "="); ok && strings.HasPrefix(name, "-") {
			if v, ok := subs[val]; ok {
				a = name + "=" + v
			}
		}
		out[i] = a
	}
	return out
}

// validateCommand checks args against the real command tree without running
// the command.
func validateCommand(args []string) error {
	root := newRoot(io.Discard, io.Discard)
	cmd, rest, err := root.Find(args)
	if err != nil {
		return err
	}
	if cmd == root {
		return fmt.Errorf("no subcommand")
	}
	if cmd.DisableFlagParsing { // report: sreport's grammar after llmflow's options
		if cmd.Name() != "report" {
			return fmt.Errorf("%s parses its own arguments: teach readme_test.go how", cmd.Name())
		}
		_, sreportArgs, err := reportOptions(rest)
		if err != nil {
			return err
		}
		_, err = reports.ParseArgs(sreportArgs)
		return err
	}
	if err := cmd.ParseFlags(rest); err != nil {
		return err
	}
	if err := cmd.ValidateArgs(cmd.Flags().Args()); err != nil {
		return err
	}
	if err := cmd.ValidateRequiredFlags(); err != nil {
		return err
	}
	if err := cmd.ValidateFlagGroups(); err != nil {
		return err
	}
	if cmd.Name() == "sync" {
		return checkWritebackGPUs(cmd)
	}
	return nil
}

// checkWritebackGPUs: `sync --to-slurmdbd` needs --gpus or pools with gpus
// in the configuration it names (runWriteback refuses to start otherwise).
func checkWritebackGPUs(cmd *cobra.Command) error {
	if wb, _ := cmd.Flags().GetBool("to-slurmdbd"); !wb {
		return nil
	}
	if gpus, _ := cmd.Flags().GetInt("gpus"); gpus > 0 {
		return nil
	}
	path, _ := cmd.Flags().GetString("config")
	cfg, err := config.Load(path)
	if err != nil {
		return err
	}
	for _, p := range cfg.Pools {
		if p.GPUs > 0 {
			return nil
		}
	}
	return fmt.Errorf("--to-slurmdbd without --gpus, and no pool of %s has gpus", path)
}

func TestREADME(t *testing.T) {
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	snippets := readmeSnippets(t, readme)
	dir := t.TempDir()

	// The main configuration: the first whole one (declaring a model).
	mainConfig := ""
	nHCL := 0
	for _, s := range snippets {
		if s.lang != "hcl" {
			continue
		}
		nHCL++
		// Padded so that diagnostics name README.md's own lines.
		padded := strings.Repeat("\n", s.line-1) + s.text
		src, err := completeHCL([]byte(padded))
		if err != nil {
			t.Errorf("hcl block at README.md:%d does not parse: %v", s.line, err)
			continue
		}
		whole := len(src) == len(padded)
		if _, err := config.Parse("README.md", src); err != nil {
			kind := "whole configuration"
			if !whole {
				kind = "fragment, completed with a minimal org, pool and model"
			}
			t.Errorf("hcl block at README.md:%d (%s):\n%v", s.line, kind, err)
			continue
		}
		if whole && mainConfig == "" {
			mainConfig = writeMainConfig(t, dir, s.text)
		}
	}
	if nHCL == 0 {
		t.Fatal("no hcl block found in README.md")
	}
	if mainConfig == "" {
		t.Fatal("README.md shows no whole configuration (an hcl block declaring a model) that parses")
	}
	subs := readmeSubstitutions(t, mainConfig)
	if err := os.WriteFile(subs["/etc/llmflow/slurmdbd-rw.dsn"], []byte("u:p@tcp(127.0.0.1:3306)/slurm_acct_db\n"), 0o600); err != nil {
		t.Fatal(err)
	}

	nCmd := 0
	for _, s := range snippets {
		cmds, err := readmeCommands(s)
		if err != nil {
			t.Errorf("README.md:%d: %v", s.line, err)
		}
		for _, words := range cmds {
			nCmd++
			args := substitute(words, subs)
			shown := "llmflow " + strings.Join(words, " ")
			if s.lang == "inline" && len(args) == 1 {
				if c, _, err := newRoot(io.Discard, io.Discard).Find(args); err != nil || c.Name() != args[0] {
					t.Errorf("README.md:%d: %s: no such command", s.line, shown)
				}
				continue
			}
			if err := validateCommand(args); err != nil {
				t.Errorf("README.md:%d: %s: %v", s.line, shown, err)
				continue
			}
			t.Logf("README.md:%d: %s", s.line, shown)
			switch args[0] {
			case "check-config", "version":
				var out, errb bytes.Buffer
				if code := Run(context.Background(), args, &out, &errb); code != 0 {
					t.Errorf("README.md:%d: %s: exit %d:\n%s%s", s.line, shown, code, out.String(), errb.String())
				}
			}
		}
	}
	if nCmd == 0 {
		t.Fatal("no llmflow command found in README.md")
	}
	t.Logf("README.md: %d hcl blocks parsed, %d llmflow commands checked", nHCL, nCmd)
}

// writeMainConfig writes the README's main configuration into dir with its
// /etc/llmflow/ and /var/lib/llmflow/ paths moved into dir, creates every
// secret file it names (0600, 64 characters) and returns its path.
func writeMainConfig(t *testing.T, dir, src string) string {
	src = strings.NewReplacer("/etc/llmflow/", dir+"/", "/var/lib/llmflow/", dir+"/").Replace(src)
	path := filepath.Join(dir, "gateway.hcl")
	if err := os.WriteFile(path, []byte(src), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := config.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range cfg.Secrets() {
		if err := os.WriteFile(s.Path, []byte(strings.Repeat("s3cr3t", 11)[:64]+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return path
}

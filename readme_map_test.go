package llmflow_test

import (
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestREADMEPackageMap checks that the package map of README.md (the
// first fenced block under "## Development") has a line for every package
// of the module, and none for a package that is gone: whoever adds,
// moves or removes a package says so there.
func TestREADMEPackageMap(t *testing.T) {
	readme, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	mapped := readmePackageMap(t, string(readme))
	pkgs := map[string]bool{}
	for _, p := range modulePackages(t) {
		pkgs[p] = true
		if !mapped[p] {
			t.Errorf("README.md's package map (## Development) has no line for %s: add one saying what it holds", p)
		}
	}
	for p := range mapped {
		if !pkgs[p] {
			t.Errorf("README.md's package map (## Development) has a line for %s, which is no package of the module", p)
		}
	}
}

// readmePackageMap returns the packages named at the start of a line of
// the map: "llmflow (root)" is the root package (".").
func readmePackageMap(t *testing.T, readme string) map[string]bool {
	_, dev, ok := strings.Cut(readme, "\n## Development\n")
	if !ok {
		t.Fatal("README.md has no ## Development section")
	}
	_, block, ok := strings.Cut(dev, "\n```\n")
	if !ok {
		t.Fatal("README.md's ## Development has no fenced package map")
	}
	block, _, _ = strings.Cut(block, "\n```")
	mapped := map[string]bool{}
	for _, line := range strings.Split(block, "\n") {
		if line == "" || line[0] == ' ' {
			continue // a description's continuation
		}
		name := strings.Fields(line)[0]
		if name == "llmflow" {
			name = "."
		}
		mapped[strings.TrimSuffix(name, "/")] = true
	}
	if !mapped["."] {
		t.Fatalf("README.md's package map has no root line (llmflow (root)):\n%s", block)
	}
	return mapped
}

// modulePackages returns the directories of the module holding Go files,
// as `go list ./...` finds them (testdata, and names starting with . or
// _, are not packages).
func modulePackages(t *testing.T) []string {
	var pkgs []string
	err := filepath.WalkDir(".", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() {
			return nil
		}
		name := d.Name()
		if path != "." && (name == "testdata" || strings.HasPrefix(name, ".") || strings.HasPrefix(name, "_")) {
			return filepath.SkipDir
		}
		if path != "." {
			if _, err := os.Stat(filepath.Join(path, "go.mod")); err == nil {
				return filepath.SkipDir // another module
			}
		}
		gos, err := filepath.Glob(filepath.Join(path, "*.go"))
		if err != nil {
			return err
		}
		if len(gos) > 0 {
			pkgs = append(pkgs, filepath.ToSlash(path))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(pkgs) < 10 {
		t.Fatalf("found only %d packages: is the test running in the module root?", len(pkgs))
	}
	return pkgs
}

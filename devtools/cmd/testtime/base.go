package main

import (
	"bufio"
	"bytes"
	"cmp"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strings"
)

// envRun names the file of per-package -test.run patterns the -exec
// wrapper adds to each test binary's arguments (-base).
const envRun = "TESTTIME_RUN"

// testList maps a package's import path to the names of its top-level
// tests, examples and fuzz targets, as go test -list prints them.
type testList map[string][]string

// listTests runs go test -list . on pkgs in dir ("": the current one) and returns what each
// package lists. It builds the test binaries without the race detector:
// the names do not depend on it.
func listTests(dir string, pkgs []string) (testList, error) {
	args := append([]string{"test", "-list", ".", "-json"}, pkgs...)
	cmd := exec.Command(cmp.Or(os.Getenv("GO"), "go"), args...)
	cmd.Dir = dir
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("go test -list in %s: %v\n%s%s", cmp.Or(dir, "."), err, stderr.Bytes(), failedOutput(out))
	}
	return parseList(bytes.NewReader(out))
}

// failedOutput returns the output lines of the packages that failed in
// go test -json's events.
func failedOutput(events []byte) string {
	out := map[string]*strings.Builder{}
	var failed []string
	for line := range bytes.Lines(events) {
		var ev struct{ Action, Package, Output string }
		if json.Unmarshal(line, &ev) != nil {
			continue
		}
		switch ev.Action {
		case "output", "build-output":
			if out[ev.Package] == nil {
				out[ev.Package] = &strings.Builder{}
			}
			out[ev.Package].WriteString(ev.Output)
		case "fail", "build-fail":
			failed = append(failed, ev.Package)
		}
	}
	var b strings.Builder
	for _, p := range failed {
		if o := out[p]; o != nil {
			b.WriteString(o.String())
		}
	}
	return b.String()
}

// listed is a line of go test -list's output that names a test.
var listed = regexp.MustCompile(`^(Test|Example|Fuzz)\w*$`)

// parseList reads go test -list -json's events.
func parseList(r io.Reader) (testList, error) {
	l := testList{}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 1<<16), 1<<24)
	for sc.Scan() {
		var ev struct{ Action, Package, Output string }
		if err := json.Unmarshal(sc.Bytes(), &ev); err != nil {
			continue // the build's own lines
		}
		name := strings.TrimSpace(ev.Output)
		if ev.Action == "output" && ev.Package != "" && listed.MatchString(name) {
			l[ev.Package] = append(l[ev.Package], name)
		}
	}
	return l, sc.Err()
}

// baseMatch is which of the base's tests run in which of this tree's
// packages, and how each was matched.
type baseMatch struct {
	run      map[string][]string // this tree's package → the base's tests to run there
	samePkg  int                 // tests found in the package of the same path
	moved    []string            // "test: base package → package" for tests found elsewhere by name
	missing  []string            // "base package test" found nowhere
	notBase  int                 // this tree's tests the base does not have (not run)
	basePkgs int
}

// matchBase matches the base's tests to this tree's: a test runs in the
// package of the same import path if that package still has a test of
// that name; otherwise in the packages that have a test of that name
// (every such package: a test whose package was split or renamed). A
// base test found nowhere is reported missing.
func matchBase(base, cur testList) baseMatch {
	m := baseMatch{run: map[string][]string{}, basePkgs: len(base)}
	byName := map[string][]string{}
	for pkg, names := range cur {
		for _, n := range names {
			byName[n] = append(byName[n], pkg)
		}
	}
	taken := map[string]map[string]bool{}
	add := func(pkg, name string) {
		if taken[pkg] == nil {
			taken[pkg] = map[string]bool{}
		}
		if !taken[pkg][name] {
			taken[pkg][name] = true
			m.run[pkg] = append(m.run[pkg], name)
		}
	}
	for _, pkg := range slices.Sorted(maps.Keys(base)) {
		for _, name := range base[pkg] {
			switch where := byName[name]; {
			case slices.Contains(cur[pkg], name):
				add(pkg, name)
				m.samePkg++
			case len(where) > 0:
				for _, p := range slices.Sorted(slices.Values(where)) {
					add(p, name)
					m.moved = append(m.moved, fmt.Sprintf("%s: %s → %s", name, pkg, p))
				}
			default:
				m.missing = append(m.missing, pkg+" "+name)
			}
		}
	}
	for pkg, names := range cur {
		for _, n := range names {
			if !taken[pkg][n] {
				m.notBase++
			}
		}
	}
	return m
}

// runPattern is the -test.run pattern that runs exactly these top-level
// tests (and all their subtests).
func runPattern(names []string) string {
	q := make([]string, len(names))
	for i, n := range names {
		q[i] = regexp.QuoteMeta(n)
	}
	slices.Sort(q)
	return "^(" + strings.Join(q, "|") + ")$"
}

// writeRunFile writes the wrapper's patterns: one line per package, its
// directory relative to the module root ("./x/y", as the report names
// it), a tab, the pattern.
func writeRunFile(path string, run map[string][]string, dirOf map[string]string) error {
	var b strings.Builder
	for _, pkg := range slices.Sorted(maps.Keys(run)) {
		fmt.Fprintf(&b, "%s\t%s\n", dirOf[pkg], runPattern(run[pkg]))
	}
	return os.WriteFile(path, []byte(b.String()), 0o644)
}

// runFor returns the pattern the run file gives the package in dir, if
// any.
func runFor(path, dir string) (string, bool) {
	b, err := os.ReadFile(path)
	if err != nil {
		return "", false
	}
	for line := range strings.Lines(string(b)) {
		d, pat, ok := strings.Cut(strings.TrimSuffix(line, "\n"), "\t")
		if ok && d == dir {
			return pat, true
		}
	}
	return "", false
}

// packageDirs returns the import paths of the packages pkgs names, in go
// list's order, and each one's directory relative to root, as "./x/y".
func packageDirs(root string, pkgs []string) ([]string, map[string]string, error) {
	args := append([]string{"list", "-f", "{{.ImportPath}}\t{{.Dir}}"}, pkgs...)
	cmd := exec.Command(cmp.Or(os.Getenv("GO"), "go"), args...)
	out, err := cmd.Output()
	if err != nil {
		return nil, nil, fmt.Errorf("go list: %w", err)
	}
	var order []string
	dirs := map[string]string{}
	for line := range strings.Lines(string(out)) {
		pkg, dir, ok := strings.Cut(strings.TrimSuffix(line, "\n"), "\t")
		if ok {
			order = append(order, pkg)
			dirs[pkg] = relDir(root, dir)
		}
	}
	return order, dirs, nil
}

// printMatch says how the base's tests were matched.
func printMatch(w io.Writer, baseDir string, m baseMatch) {
	n := 0
	for _, names := range m.run {
		n += len(names)
	}
	fmt.Fprintf(w, "base %s: %d packages with tests; running %d of their tests in %d packages here (%d in the package of the same path, %d found by name elsewhere), %d not found; %d tests here that the base lacks are not run\n",
		baseDir, m.basePkgs, n, len(m.run), m.samePkg, len(m.moved), len(m.missing), m.notBase)
	for _, s := range m.moved {
		fmt.Fprintf(w, "  moved   %s\n", s)
	}
	for _, s := range m.missing {
		fmt.Fprintf(w, "  missing %s\n", s)
	}
}

package archtest

import (
	"bytes"
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"testing"
)

// nonStandard, as a forbidden pattern, matches every package outside the
// standard library.
const nonStandard = "(non-standard)"

// A rule forbids the packages matched by pkgs, less those matched by
// except, to depend, directly or through other packages, on any package
// matched by forbid. Tests' dependencies do not count.
//
// A pattern is an import path, or a path ending in "/..." that matches the
// path and every path below it. A pattern whose first element has no dot
// (such as "store/...") is relative to the module; others (such as
// "github.com/sony/gobreaker/v2/...") are full import paths. The pattern
// "..." is every package of the module.
type rule struct {
	name   string // of the subtest; default: the pkgs
	pkgs   []string
	except []string
	forbid []string
	reason string
}

// services are the service packages: the commands and harnesses, and the
// packages that are one service's logic (its server or its loop). A
// library package serves them all, so it depends on none of them.
var services = []string{"cmd/...", "devtools/...", "worker/...", "triage/...", "ingestapi/..."}

var rules = []rule{
	{
		pkgs: []string{"store/...", "queue/..."},
		forbid: []string{
			"github.com/sashabaranov/go-openai/...",
			"github.com/sony/gobreaker/v2/...",
			"provider/...",
			"pipeline/...",
		},
		reason: "store and queue use the extraction's shared types (extracttype), not its engine: " +
			"they must not compile in the LLM client, the provider's resilience layer or the pipeline " +
			"(DESIGN.md, Layout: a small package of shared types)",
	},
	{
		pkgs:   []string{"extracttype/..."},
		forbid: []string{nonStandard},
		reason: "extracttype is a leaf every layer may import, as river's rivertype is: " +
			"it imports only the standard library",
	},
	{
		// The commands' wiring, cmd/internal/cmdconfig, is under cmd/:
		// covered here, and Go's internal rule keeps everything outside
		// cmd/ from importing it.
		name:   "libraries",
		pkgs:   []string{"..."},
		except: services,
		forbid: services,
		reason: "a library package (every package but the commands, the harnesses and the service packages " +
			"worker, triage and ingestapi) must not depend on a service package: the library serves the services, " +
			"not the other way round (DESIGN.md, Layout; STYLE.md, Layout and names)",
	},
	{
		name:   "startup",
		pkgs:   []string{"..."},
		except: []string{"cmd/...", "devtools/cmd/...", "internal/startup"},
		forbid: []string{"internal/startup"},
		reason: "internal/startup reads the environment and builds the process's logger: only programs' mains " +
			"(cmd/..., devtools/cmd/...) do that; a library takes its settings and logger from its caller " +
			"(STYLE.md, Configuration and Logging). ingest, whose command line moved to cmd/ingest, is one of them",
	},
}

// pkg is the part of `go list -json` this test reads.
type pkg struct {
	ImportPath string
	Standard   bool
	Imports    []string
	Deps       []string
	Module     *struct{ Path string }
}

// graph is the module's packages and every package they depend on.
type graph struct {
	module string          // the module path
	pkgs   map[string]*pkg // by import path
	own    []string        // the module's own packages, sorted
}

// loadGraph runs go list once for all the tests of the package.
func loadGraph(t *testing.T) *graph {
	t.Helper()
	g, err := readGraph()
	if err != nil {
		t.Fatal(err)
	}
	return g
}

var readGraph = sync.OnceValues(func() (*graph, error) {
	out, err := exec.Command("go", "list", "-m", "-f", "{{.Path}} {{.Dir}}").Output()
	if err != nil {
		return nil, fmt.Errorf("go list -m: %v%s", err, stderr(err))
	}
	module, dir, ok := strings.Cut(strings.TrimSpace(string(out)), " ")
	if !ok {
		return nil, fmt.Errorf("go list -m printed %q, want path and directory", out)
	}
	cmd := exec.Command("go", "list", "-deps", "-json=ImportPath,Standard,Imports,Deps,Module", "./...")
	cmd.Dir = dir
	out, err = cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("go list -deps -json ./...: %v%s", err, stderr(err))
	}
	g := &graph{module: module, pkgs: map[string]*pkg{}}
	dec := json.NewDecoder(bytes.NewReader(out))
	for {
		p := new(pkg)
		if err := dec.Decode(p); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			return nil, fmt.Errorf("go list -deps -json: %v", err)
		}
		g.pkgs[p.ImportPath] = p
		if p.Module != nil && p.Module.Path == module {
			g.own = append(g.own, p.ImportPath)
		}
	}
	slices.Sort(g.own)
	if len(g.own) == 0 {
		return nil, fmt.Errorf("go list found no package of module %s", module)
	}
	return g, nil
})

func stderr(err error) string {
	var ee *exec.ExitError
	if errors.As(err, &ee) && len(ee.Stderr) > 0 {
		return "\n" + string(ee.Stderr)
	}
	return ""
}

// matches reports whether the import path p matches pattern.
func (g *graph) matches(pattern, p string) bool {
	if pattern == nonStandard {
		return !g.pkgs[p].Standard
	}
	if first, _, _ := strings.Cut(pattern, "/"); pattern == "..." || !strings.Contains(first, ".") {
		pattern = g.module + "/" + pattern
	}
	if base, ok := strings.CutSuffix(pattern, "/..."); ok {
		return p == base || strings.HasPrefix(p, base+"/")
	}
	return p == pattern
}

// matchesAny reports whether p matches one of patterns.
func (g *graph) matchesAny(patterns []string, p string) bool {
	return slices.ContainsFunc(patterns, func(pat string) bool { return g.matches(pat, p) })
}

// chain returns the shortest chain of imports from one package to
// another, both ends included.
func (g *graph) chain(from, to string) []string {
	prev := map[string]string{from: ""}
	queue := []string{from}
	for len(queue) > 0 {
		p := queue[0]
		queue = queue[1:]
		if p == to {
			var c []string
			for ; p != ""; p = prev[p] {
				c = append(c, p)
			}
			slices.Reverse(c)
			return c
		}
		for _, q := range g.pkgs[p].Imports {
			if _, seen := prev[q]; !seen && g.pkgs[q] != nil {
				prev[q] = p
				queue = append(queue, q)
			}
		}
	}
	return []string{from, "...", to}
}

func TestDependencyRules(t *testing.T) {
	t.Parallel()
	g := loadGraph(t)

	for _, r := range rules {
		t.Run(cmp.Or(r.name, strings.Join(r.pkgs, ",")), func(t *testing.T) {
			var checked []string
			for _, p := range g.own {
				if !g.matchesAny(r.pkgs, p) || g.matchesAny(r.except, p) {
					continue
				}
				checked = append(checked, p)
				for _, f := range r.forbid {
					// One report per package and pattern, by the
					// shortest chain: the first import to remove.
					var worst []string
					for _, d := range g.pkgs[p].Deps {
						if !g.matches(f, d) {
							continue
						}
						if c := g.chain(p, d); worst == nil || len(c) < len(worst) {
							worst = c
						}
					}
					if worst != nil {
						t.Errorf("%s depends on %s, forbidden by %q: %s",
							p, worst[len(worst)-1], f, strings.Join(worst, " -> "))
					}
				}
			}
			if len(checked) == 0 {
				t.Errorf("rule %q matches no package of the module", r.pkgs)
			}
			if t.Failed() {
				t.Logf("the rule: %s", r.reason)
			}
		})
	}
}

// TestRulePatternsExist keeps the rules from passing by typo or by
// rename: every pattern of a rule must match a package that the module
// has or depends on, so a forbidden package that is moved or renamed
// shows up here instead of silently escaping its rule.
func TestRulePatternsExist(t *testing.T) {
	t.Parallel()
	g := loadGraph(t)
	all := make([]string, 0, len(g.pkgs))
	for p := range g.pkgs {
		all = append(all, p)
	}
	for _, r := range rules {
		for _, pat := range slices.Concat(r.pkgs, r.except, r.forbid) {
			if pat == nonStandard {
				continue
			}
			if !slices.ContainsFunc(all, func(p string) bool { return g.matches(pat, p) }) {
				t.Errorf("pattern %q of rule %q matches no package the module has or depends on", pat, r.pkgs)
			}
		}
	}
}

func TestMatches(t *testing.T) {
	t.Parallel()
	g := &graph{module: "example.com/m", pkgs: map[string]*pkg{
		"fmt":                    {ImportPath: "fmt", Standard: true},
		"example.com/m/store":    {ImportPath: "example.com/m/store"},
		"github.com/x/y/v2/sub":  {ImportPath: "github.com/x/y/v2/sub"},
		"example.com/m/storeish": {ImportPath: "example.com/m/storeish"},
	}}
	for _, tt := range []struct {
		pattern, path string
		want          bool
	}{
		{"store", "example.com/m/store", true},
		{"store/...", "example.com/m/store", true},
		{"store/...", "example.com/m/store/storetest", true},
		{"store/...", "example.com/m/storeish", false},
		{"store", "example.com/m/store/storetest", false},
		{"...", "example.com/m/store/storetest", true},
		{"...", "example.com/m", true},
		{"...", "github.com/x/y/v2/sub", false},
		{"github.com/x/y/v2/...", "github.com/x/y/v2/sub", true},
		{"github.com/x/y/v2/...", "github.com/x/y", false},
		{nonStandard, "fmt", false},
		{nonStandard, "github.com/x/y/v2/sub", true},
	} {
		if got := g.matches(tt.pattern, tt.path); got != tt.want {
			t.Errorf("matches(%q, %q) = %v, want %v", tt.pattern, tt.path, got, tt.want)
		}
	}
}

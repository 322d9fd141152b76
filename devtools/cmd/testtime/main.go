// Command testtime runs the test suite as `make test` does (go test -race
// -count=1) and prints what it cost: wall time, CPU time (user+sys) of go
// test and everything it ran (compiler, linker, vet, the test binaries and
// their subprocesses), the machine's load average before and after, the
// CPU time of each test binary, and the tests that took longest.
//
// Usage:
//
//	testtime [-top 15] [-json FILE] [-race=true] [-base DIR] [PACKAGES...] [-- GO TEST FLAGS...]
//
// PACKAGES default to ./... . With -base, it runs only the tests that
// the tree in DIR (an older checkout of the module) has: it lists both
// trees' tests with go test -list, runs each base test in the package of
// the same import path if that package still has it, else in every
// package that has a test of that name (a moved test), and gives each
// test binary its own -test.run pattern; it prints how it matched them,
// and the tests it could not find. The figures are those of one run on a
// shared machine: compare two trees by alternating their runs in one
// session and quote ratios, preferring CPU time, which other load
// changes far less than wall time (docs/testing.md). The CPU time of
// Postgres and NATS, which run apart, is not counted.
//
// It runs go test with -json and with itself as -exec, so each test
// binary runs under a small wrapper that records the binary's CPU time;
// the build's is the rest. It exits with go test's status.
package main

import (
	"bufio"
	"cmp"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"
)

// Environment of the -exec wrapper: the file it appends a line to per test
// binary, and the module root, from which it names the package.
const (
	envReport = "TESTTIME_REPORT"
	envRoot   = "TESTTIME_ROOT"
)

func main() {
	if os.Getenv(envReport) != "" {
		os.Exit(wrap(os.Args[1:]))
	}
	top := flag.Int("top", 15, "how many of the longest tests to list")
	jsonOut := flag.String("json", "", "also write go test's -json output to `FILE`")
	race := flag.Bool("race", true, "run with the race detector, as make test does")
	base := flag.String("base", "", "run only the tests the module tree in `DIR` has (matched by package, else by name)")
	flag.Usage = func() {
		fmt.Fprintf(flag.CommandLine.Output(), "usage: testtime [flags] [packages] [-- go test flags]\n")
		flag.PrintDefaults()
	}
	// The go test flags go after "--", which flag.Parse would drop:
	// split them off first.
	own, extra := splitArgs(os.Args[1:])
	flag.CommandLine.Parse(own)
	pkgs := flag.Args()
	if len(pkgs) == 0 {
		pkgs = []string{"./..."}
	}
	code, err := run(pkgs, extra, *race, *top, *jsonOut, *base)
	if err != nil {
		fmt.Fprintln(os.Stderr, "testtime:", err)
		os.Exit(2)
	}
	os.Exit(code)
}

// splitArgs splits the arguments at the first "--": testtime's flags and
// packages before, go test flags after.
func splitArgs(args []string) (own, extra []string) {
	if i := slices.Index(args, "--"); i >= 0 {
		return args[:i], args[i+1:]
	}
	return args, nil
}

func run(pkgs, extra []string, race bool, top int, jsonOut, baseDir string) (int, error) {
	self, err := os.Executable()
	if err != nil {
		return 0, err
	}
	root, err := moduleRoot()
	if err != nil {
		return 0, err
	}
	rep, err := os.CreateTemp("", "testtime-*.txt")
	if err != nil {
		return 0, err
	}
	rep.Close()
	defer os.Remove(rep.Name())

	env := append(os.Environ(), envReport+"="+rep.Name(), envRoot+"="+root)
	var matchOut strings.Builder
	if baseDir != "" {
		runFile, runPkgs, err := baseRun(root, baseDir, pkgs, &matchOut)
		if err != nil {
			return 0, err
		}
		defer os.Remove(runFile)
		env = append(env, envRun+"="+runFile)
		pkgs = runPkgs
	}

	args := []string{"test", "-count=1", "-json", "-exec", self}
	if race {
		args = append(args, "-race")
	}
	args = append(args, extra...)
	args = append(args, pkgs...)
	cmd := exec.Command(cmp.Or(os.Getenv("GO"), "go"), args...)
	cmd.Env = env
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		return 0, err
	}
	var raw io.Writer = io.Discard
	if jsonOut != "" {
		f, err := os.Create(jsonOut)
		if err != nil {
			return 0, err
		}
		defer f.Close()
		raw = f
	}

	loadBefore := loadAvg()
	start := time.Now()
	if err := cmd.Start(); err != nil {
		return 0, err
	}
	sum := readEvents(io.TeeReader(out, raw))
	werr := cmd.Wait()
	wall := time.Since(start)
	loadAfter := loadAvg()
	code := 0
	if werr != nil {
		ee, ok := werr.(*exec.ExitError)
		if !ok {
			return 0, werr
		}
		code = ee.ExitCode()
	}
	user, sys := cmd.ProcessState.UserTime(), cmd.ProcessState.SystemTime()
	bins, err := readReport(rep.Name())
	if err != nil {
		return 0, err
	}

	w := bufio.NewWriter(os.Stdout)
	defer w.Flush()
	shown := slices.Clone(args)
	shown[slices.Index(shown, self)] = "testtime"
	if baseDir != "" {
		shown = append(shown[:len(shown)-len(pkgs)], fmt.Sprintf("[%d packages]", len(pkgs)))
	}
	fmt.Fprintf(w, "go %s\n", strings.Join(shown, " "))
	fmt.Fprint(w, matchOut.String())
	fmt.Fprintf(w, "load average before %s, after %s\n", loadBefore, loadAfter)
	fmt.Fprintf(w, "wall %.1fs  user %.1fs  sys %.1fs  user+sys %.1fs\n", wall.Seconds(), user.Seconds(), sys.Seconds(), (user + sys).Seconds())
	var binCPU time.Duration
	for _, b := range bins {
		binCPU += b.cpu
	}
	fmt.Fprintf(w, "test binaries %d, their CPU %.1fs; the build's (compile, link, vet) and go's %.1fs\n",
		len(bins), binCPU.Seconds(), (user + sys - binCPU).Seconds())
	fmt.Fprintf(w, "tests: %d passed, %d failed, %d skipped\n", sum.passed, len(sum.failed), sum.skipped)
	for _, f := range sum.failed {
		fmt.Fprintf(w, "  FAIL %s\n", f)
	}

	slices.SortFunc(bins, func(a, b binRun) int { return cmp.Compare(b.cpu, a.cpu) })
	fmt.Fprintf(w, "\ntest binaries by CPU time (user+sys), wall:\n")
	for _, b := range bins[:min(top, len(bins))] {
		fmt.Fprintf(w, "  %7.1fs %7.1fs  %s\n", b.cpu.Seconds(), b.wall.Seconds(), b.pkg)
	}
	slices.SortFunc(sum.tests, func(a, b testRun) int { return cmp.Compare(b.elapsed, a.elapsed) })
	fmt.Fprintf(w, "\nlongest tests (elapsed; parallel tests overlap):\n")
	for _, tr := range sum.tests[:min(top, len(sum.tests))] {
		fmt.Fprintf(w, "  %7.1fs  %s %s\n", tr.elapsed, tr.pkg, tr.name)
	}
	return code, nil
}

// relDir names dir relative to the module root, as "./x/y", or returns
// it as it is if it is not under root.
func relDir(root, dir string) string {
	if rel, err := filepath.Rel(root, dir); err == nil && !strings.HasPrefix(rel, "..") {
		return "./" + filepath.ToSlash(rel)
	}
	return dir
}

// baseRun lists the tests of the tree in baseDir and of this one (at
// root), matches them (matchBase), writes the wrapper's run file and
// returns it with the import paths of the packages to test, in the
// order pkgs names them. It prints
// the matching to w.
func baseRun(root, baseDir string, pkgs []string, w io.Writer) (runFile string, runPkgs []string, err error) {
	base, err := listTests(baseDir, pkgs)
	if err != nil {
		return "", nil, err
	}
	cur, err := listTests("", pkgs)
	if err != nil {
		return "", nil, err
	}
	m := matchBase(base, cur)
	// In the order pkgs names them, which is the order go test starts
	// them in.
	order, dirs, err := packageDirs(root, pkgs)
	if err != nil {
		return "", nil, err
	}
	for _, p := range order {
		if m.run[p] != nil {
			runPkgs = append(runPkgs, p)
		}
	}
	f, err := os.CreateTemp("", "testtime-run-*.txt")
	if err != nil {
		return "", nil, err
	}
	f.Close()
	if err := writeRunFile(f.Name(), m.run, dirs); err != nil {
		return "", nil, err
	}
	printMatch(w, baseDir, m)
	return f.Name(), runPkgs, nil
}

// moduleRoot returns the directory of the main module's go.mod.
func moduleRoot() (string, error) {
	out, err := exec.Command(cmp.Or(os.Getenv("GO"), "go"), "env", "GOMOD").Output()
	if err != nil {
		return "", fmt.Errorf("go env GOMOD: %w", err)
	}
	mod := strings.TrimSpace(string(out))
	if mod == "" || mod == os.DevNull {
		return "", fmt.Errorf("not in a module")
	}
	return filepath.Dir(mod), nil
}

// loadAvg returns the 1, 5 and 15 minute load averages from
// /proc/loadavg, or "?" where there is none.
func loadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "?"
	}
	return strings.Join(f[:3], " ")
}

// testRun is one test's (or subtest's) result.
type testRun struct {
	pkg, name string
	elapsed   float64 // seconds
}

// summary is what the suite's -json events say.
type summary struct {
	tests   []testRun
	passed  int
	skipped int
	failed  []string // package and test of each failure, or the package alone
}

// readEvents reads go test -json events (cmd/test2json's TestEvent) and
// passes every other line to stdout as it comes: the build's errors, say.
func readEvents(r io.Reader) summary {
	var s summary
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 1<<20), 1<<26)
	for sc.Scan() {
		var ev struct {
			Action  string
			Package string
			Test    string
			Elapsed float64
			Output  string
		}
		if json.Unmarshal(sc.Bytes(), &ev) != nil {
			fmt.Println(sc.Text())
			continue
		}
		if ev.Action == "build-output" || ev.Action == "build-fail" {
			fmt.Print(ev.Output)
			continue
		}
		switch {
		case ev.Action == "fail" && ev.Test == "":
			s.failed = append(s.failed, ev.Package)
		case ev.Test == "":
		case ev.Action == "pass":
			s.passed++
			s.tests = append(s.tests, testRun{ev.Package, ev.Test, ev.Elapsed})
		case ev.Action == "fail":
			s.failed = append(s.failed, ev.Package+" "+ev.Test)
			s.tests = append(s.tests, testRun{ev.Package, ev.Test, ev.Elapsed})
		case ev.Action == "skip":
			s.skipped++
		}
	}
	return s
}

// binRun is one test binary's run, as the wrapper recorded it.
type binRun struct {
	pkg       string // directory relative to the module root
	cpu, wall time.Duration
}

// readReport reads the wrapper's lines: user+sys and wall nanoseconds,
// then the directory.
func readReport(path string) ([]binRun, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var out []binRun
	for line := range strings.Lines(string(b)) {
		f := strings.SplitN(strings.TrimSuffix(line, "\n"), " ", 3)
		var r binRun
		var cpu, wall int64
		if len(f) != 3 {
			return nil, fmt.Errorf("%s: %q: want CPU, wall and directory", path, line)
		}
		if _, err := fmt.Sscanf(f[0]+" "+f[1], "%d %d", &cpu, &wall); err != nil {
			return nil, fmt.Errorf("%s: %q: %v", path, line, err)
		}
		r.pkg, r.cpu, r.wall = f[2], time.Duration(cpu), time.Duration(wall)
		out = append(out, r)
	}
	return out, nil
}

// wrap runs a test binary (go test -exec) with its arguments, passing the
// signals go test sends on to it, and appends its CPU time, wall time and
// directory (go test runs it in its package's) to the report. It returns
// the binary's exit code.
func wrap(args []string) int {
	if len(args) == 0 {
		fmt.Fprintln(os.Stderr, "testtime: -exec without a program")
		return 2
	}
	wd, _ := os.Getwd()
	dir := relDir(os.Getenv(envRoot), wd)
	if f := os.Getenv(envRun); f != "" {
		if pat, ok := runFor(f, dir); ok {
			args = append(args, "-test.run="+pat)
		}
	}
	cmd := exec.Command(args[0], args[1:]...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM, syscall.SIGQUIT)
	start := time.Now()
	if err := cmd.Start(); err != nil {
		fmt.Fprintln(os.Stderr, "testtime:", err)
		return 2
	}
	go func() {
		for s := range sigs {
			_ = cmd.Process.Signal(s)
		}
	}()
	err := cmd.Wait()
	wall := time.Since(start)
	code := 0
	if err != nil {
		ee, ok := err.(*exec.ExitError)
		if !ok {
			fmt.Fprintln(os.Stderr, "testtime:", err)
			return 2
		}
		code = ee.ExitCode()
		if code < 0 { // killed by a signal
			code = 1
		}
	}
	cpu := cmd.ProcessState.UserTime() + cmd.ProcessState.SystemTime()
	f, err := os.OpenFile(os.Getenv(envReport), os.O_WRONLY|os.O_APPEND, 0)
	if err == nil {
		// One short write with O_APPEND: lines of binaries run at once do
		// not interleave.
		_, err = fmt.Fprintf(f, "%d %d %s\n", cpu.Nanoseconds(), wall.Nanoseconds(), dir)
		f.Close()
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "testtime: report:", err)
	}
	return code
}

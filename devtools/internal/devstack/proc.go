package devstack

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Proc is one child process of a harness. Its output is appended to a
// log file, so a process started again on the same log keeps its history.
// Each child runs in its own process group (a Ctrl-C in the terminal
// reaches the harness only, which then stops the children in order) and
// gets SIGKILL if the harness dies.
type Proc struct {
	name    string
	logPath string
	cmd     *exec.Cmd
	done    chan struct{} // closed when the process has exited
	err     error         // the exit error, once done is closed
}

// Spec says how to start a Proc.
type Spec struct {
	Name    string              // for errors: "worker 1", "postgres"
	LogPath string              // appended to, created if missing
	Dir     string              // working directory; "" is the harness's
	Env     []string            // added to the harness's environment
	Cred    *syscall.Credential // run as this user; nil means the harness's own
	Args    []string            // Args[0] is the program
	// Stdout, if set, takes the process's standard output; its standard
	// error still goes to the log.
	Stdout io.Writer
}

// Start starts spec's program. It returns once the process runs.
func Start(spec Spec) (*Proc, error) {
	if len(spec.Args) == 0 {
		return nil, fmt.Errorf("starting %s: no program", spec.Name)
	}
	logf, err := os.OpenFile(spec.LogPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(spec.Args[0], spec.Args[1:]...)
	cmd.Dir = spec.Dir
	cmd.Env = append(os.Environ(), spec.Env...)
	cmd.Stdout, cmd.Stderr = logf, logf
	if spec.Stdout != nil {
		cmd.Stdout = spec.Stdout
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL, Credential: spec.Cred}
	if err := cmd.Start(); err != nil {
		logf.Close()
		return nil, fmt.Errorf("starting %s: %w", spec.Name, err)
	}
	p := &Proc{name: spec.Name, logPath: spec.LogPath, cmd: cmd, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		logf.Close()
		close(p.done)
	}()
	return p, nil
}

// Run runs spec's program to its end. A failure to start, an exit status
// other than 0 (the error then holds the end of the log) and ctx ending
// (the process is killed) are errors.
func Run(ctx context.Context, spec Spec) error {
	p, err := Start(spec)
	if err != nil {
		return err
	}
	select {
	case <-p.done:
	case <-ctx.Done():
		p.Kill()
		return ctx.Err()
	}
	if p.err != nil {
		return fmt.Errorf("%s: %v (log %s):\n%s", spec.Name, p.err, spec.LogPath, Tail(spec.LogPath, 15))
	}
	return nil
}

// Name is the name the process was started with.
func (p *Proc) Name() string { return p.name }

// LogPath is the process's log file.
func (p *Proc) LogPath() string { return p.logPath }

// Pid is the process id.
func (p *Proc) Pid() int { return p.cmd.Process.Pid }

// Done is closed when the process has exited.
func (p *Proc) Done() <-chan struct{} { return p.done }

// Err is the exit error once Done is closed: nil for exit status 0.
func (p *Proc) Err() error {
	<-p.done
	return p.err
}

// Exited reports whether the process has ended.
func (p *Proc) Exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// Signal sends sig to the process (not its group). A process that has
// ended is not an error.
func (p *Proc) Signal(sig syscall.Signal) error {
	if p.Exited() {
		return nil
	}
	err := p.cmd.Process.Signal(sig)
	if errors.Is(err, os.ErrProcessDone) {
		return nil
	}
	return err
}

// Wait waits up to timeout for the process to end and reports whether it
// did.
func (p *Proc) Wait(timeout time.Duration) bool {
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case <-p.done:
		return true
	case <-t.C:
		return false
	}
}

// Stop sends sig, waits up to grace, then kills the whole process group
// and waits for the end. It returns false when sig alone did not stop it.
func (p *Proc) Stop(sig syscall.Signal, grace time.Duration) bool {
	if p.Exited() {
		return true
	}
	p.Signal(sig)
	if p.Wait(grace) {
		return true
	}
	syscall.Kill(-p.Pid(), syscall.SIGKILL)
	p.Wait(10 * time.Second)
	return false
}

// Kill sends SIGKILL to the process and waits for its end.
func (p *Proc) Kill() {
	p.Signal(syscall.SIGKILL)
	p.Wait(10 * time.Second)
}

// ExitStatus describes how the process ended: "running", "exit status 0",
// or the exit error.
func (p *Proc) ExitStatus() string {
	if !p.Exited() {
		return "running"
	}
	if p.err == nil {
		return "exit status 0"
	}
	return p.err.Error()
}

// CPUTime is the user and system CPU time the process used, once it has
// ended; 0 before.
func (p *Proc) CPUTime() time.Duration {
	if !p.Exited() || p.cmd.ProcessState == nil {
		return 0
	}
	return p.cmd.ProcessState.UserTime() + p.cmd.ProcessState.SystemTime()
}

// RSSMB is the process's resident set size in MB (VmRSS of
// /proc/<pid>/status), or 0 when it cannot be read.
func (p *Proc) RSSMB() float64 {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(p.Pid()) + "/status")
	if err != nil {
		return 0
	}
	for _, l := range strings.Split(string(b), "\n") {
		if f := strings.Fields(l); len(f) >= 2 && f[0] == "VmRSS:" {
			kb, _ := strconv.ParseFloat(f[1], 64)
			return kb / 1024
		}
	}
	return 0
}

// Tail returns the last n lines of the file at path, indented, for an
// error message; or the read error in parentheses.
func Tail(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return "(" + err.Error() + ")"
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return "    " + strings.Join(lines, "\n    ")
}

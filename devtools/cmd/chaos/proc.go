package main

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"syscall"
	"time"
)

// proc is one child process of the harness. Its output is appended to a
// log file, so a process started again on the same log keeps its history.
// Each child runs in its own process group (a Ctrl-C in the terminal
// reaches the harness only, which then stops the children in order) and
// gets SIGKILL if the harness dies.
type proc struct {
	name    string
	logPath string
	cmd     *exec.Cmd
	done    chan struct{} // closed when the process has exited
	err     error         // the exit error, once done is closed
}

// procSpec says how to start a proc.
type procSpec struct {
	name    string
	logPath string
	dir     string
	env     []string            // added to the harness's environment
	cred    *syscall.Credential // run as this user; nil means the harness's own
	args    []string            // args[0] is the program
}

// startProc starts spec's program. It returns once the process runs.
func startProc(spec procSpec) (*proc, error) {
	logf, err := os.OpenFile(spec.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(spec.args[0], spec.args[1:]...)
	cmd.Dir = spec.dir
	cmd.Env = append(os.Environ(), spec.env...)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL, Credential: spec.cred}
	if err := cmd.Start(); err != nil {
		logf.Close()
		return nil, fmt.Errorf("starting %s: %w", spec.name, err)
	}
	p := &proc{name: spec.name, logPath: spec.logPath, cmd: cmd, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		logf.Close()
		close(p.done)
	}()
	return p, nil
}

// pid is the process id.
func (p *proc) pid() int { return p.cmd.Process.Pid }

// exited reports whether the process has ended.
func (p *proc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// signal sends sig to the process (not its group).
func (p *proc) signal(sig syscall.Signal) error {
	if p.exited() {
		return nil
	}
	err := p.cmd.Process.Signal(sig)
	if errors.Is(err, os.ErrProcessDone) {
		return nil
	}
	return err
}

// wait waits up to timeout for the process to end and reports whether it
// did.
func (p *proc) wait(timeout time.Duration) bool {
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case <-p.done:
		return true
	case <-t.C:
		return false
	}
}

// stop sends sig, waits up to grace, then kills the whole process group
// and waits for the end. It returns false when sig alone did not stop it.
func (p *proc) stop(sig syscall.Signal, grace time.Duration) bool {
	if p.exited() {
		return true
	}
	p.signal(sig)
	if p.wait(grace) {
		return true
	}
	syscall.Kill(-p.pid(), syscall.SIGKILL)
	p.wait(10 * time.Second)
	return false
}

// kill sends SIGKILL to the process and waits for its end.
func (p *proc) kill() {
	p.signal(syscall.SIGKILL)
	p.wait(10 * time.Second)
}

// exitStatus describes how the process ended.
func (p *proc) exitStatus() string {
	if !p.exited() {
		return "running"
	}
	if p.err == nil {
		return "exit status 0"
	}
	return p.err.Error()
}

package main

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"path/filepath"
	"strconv"
	"syscall"
	"time"
)

// freePort asks the kernel for a free TCP port on 127.0.0.1. The ports of
// the machine's shared services are never returned.
func freePort() (int, error) {
	for range 10 {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return 0, err
		}
		port := ln.Addr().(*net.TCPAddr).Port
		ln.Close()
		if port != 5432 && port != 4222 {
			return port, nil
		}
	}
	return 0, fmt.Errorf("no free port")
}

// waitPort waits until 127.0.0.1:port accepts connections, p exits, or
// timeout passes.
func waitPort(ctx context.Context, port int, p *proc, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	addr := "127.0.0.1:" + strconv.Itoa(port)
	for {
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err == nil {
			c.Close()
			return nil
		}
		if p.exited() {
			return fmt.Errorf("%s exited: %s (log %s):\n%s", p.name, p.exitStatus(), p.logPath, tail(p.logPath, 15))
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s not listening on %s after %s", p.name, addr, timeout)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// natsServer is a private NATS server with JetStream: devtools/cmd/natsd on its own
// port and store directory.
type natsServer struct {
	bin     string // the natsd binary
	dir     string // holds store/ and natsd.log
	port    int
	proc    *proc
	started int
}

func (n *natsServer) url() string { return "nats://127.0.0.1:" + strconv.Itoa(n.port) }

// start starts natsd on the store directory and waits for its port.
func (n *natsServer) start(ctx context.Context) error {
	p, err := startProc(procSpec{name: "natsd", logPath: filepath.Join(n.dir, "natsd.log"), dir: n.dir, args: []string{
		n.bin, "-addr", "127.0.0.1:" + strconv.Itoa(n.port), "-store-dir", filepath.Join(n.dir, "store"),
	}})
	if err != nil {
		return err
	}
	n.proc = p
	n.started++
	return waitPort(ctx, n.port, p, 30*time.Second)
}

// stop shuts natsd down gracefully (SIGTERM), killing it after 20s.
func (n *natsServer) stop() {
	if n.proc != nil {
		n.proc.stop(syscall.SIGTERM, 20*time.Second)
	}
}

// workerProc is one cmd/worker process slot; a restart reuses its log and
// health port.
type workerProc struct {
	index      int
	bin        string
	logPath    string
	healthPort int
	env        []string
	proc       *proc
	starts     int
	kills      int
	// down is set while the harness means the worker to be stopped, so
	// its exit is not taken for a crash.
	down bool
	// crashed is set from a crash until the worker is started again.
	crashed   bool
	crashedAt time.Time
}

// start starts the worker.
func (w *workerProc) start() error {
	p, err := startProc(procSpec{name: fmt.Sprintf("worker %d", w.index), logPath: w.logPath, env: w.env, args: []string{
		w.bin, "-health-addr", "127.0.0.1:" + strconv.Itoa(w.healthPort), "-log-level", "info",
	}})
	if err != nil {
		return err
	}
	w.proc = p
	w.starts++
	return nil
}

// waitReady waits until the worker's /readyz answers 200: it consumes, and
// reaches NATS and Postgres.
func (w *workerProc) waitReady(ctx context.Context, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	url := fmt.Sprintf("http://127.0.0.1:%d/readyz", w.healthPort)
	client := &http.Client{Timeout: 3 * time.Second}
	for {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		resp, err := client.Do(req)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		if w.proc.exited() {
			return fmt.Errorf("worker %d exited: %s (log %s):\n%s", w.index, w.proc.exitStatus(), w.logPath, tail(w.logPath, 15))
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("worker %d not ready after %s (log %s):\n%s", w.index, timeout, w.logPath, tail(w.logPath, 15))
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

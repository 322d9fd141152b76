package devstack

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"time"
)

// The ports of the machine's shared Postgres and NATS, never handed out.
var sharedPorts = map[int]bool{5432: true, 4222: true}

// FreePort asks the kernel for a free TCP port on 127.0.0.1. The ports of
// the machine's shared services (5432, 4222) are never returned.
func FreePort() (int, error) {
	for range 10 {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return 0, err
		}
		port := ln.Addr().(*net.TCPAddr).Port
		ln.Close()
		if !sharedPorts[port] {
			return port, nil
		}
	}
	return 0, fmt.Errorf("no free port")
}

// Addr is "127.0.0.1:port".
func Addr(port int) string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(port)) }

// WaitPort waits until 127.0.0.1:port accepts connections. It fails when
// p (if not nil) exits first, with the end of its log, when timeout
// passes, or when ctx ends.
func WaitPort(ctx context.Context, port int, p *Proc, timeout time.Duration) error {
	addr := Addr(port)
	return poll(ctx, p, timeout, 50*time.Millisecond, "listening on "+addr, func() bool {
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err != nil {
			return false
		}
		c.Close()
		return true
	})
}

// WaitHTTP waits until a GET of url answers 200, as a /healthz or /readyz
// does once the process serves. It fails as WaitPort does.
func WaitHTTP(ctx context.Context, url string, p *Proc, timeout time.Duration) error {
	client := &http.Client{Timeout: 3 * time.Second}
	return poll(ctx, p, timeout, 100*time.Millisecond, "ready at "+url, func() bool {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			return false
		}
		resp, err := client.Do(req)
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})
}

// poll calls ok every interval until it reports true, p exits, timeout
// passes or ctx ends. what says what was awaited, for the error.
func poll(ctx context.Context, p *Proc, timeout, interval time.Duration, what string, ok func() bool) error {
	deadline := time.Now().Add(timeout)
	name := "process"
	if p != nil {
		name = p.name
	}
	for {
		if ok() {
			return nil
		}
		if p != nil && p.Exited() {
			return fmt.Errorf("%s exited: %s (log %s):\n%s", p.name, p.ExitStatus(), p.logPath, Tail(p.logPath, 15))
		}
		if time.Now().After(deadline) {
			if p != nil {
				return fmt.Errorf("%s not %s after %s (log %s):\n%s", name, what, timeout, p.logPath, Tail(p.logPath, 15))
			}
			return fmt.Errorf("%s not %s after %s", name, what, timeout)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(interval):
		}
	}
}

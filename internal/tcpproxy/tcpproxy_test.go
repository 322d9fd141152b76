package tcpproxy

import (
	"bufio"
	"io"
	"net"
	"strings"
	"testing"
	"time"
)

// echoServer answers each line with the same line, until the test ends.
func echoServer(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				io.Copy(c, c)
			}()
		}
	}()
	return ln.Addr().String()
}

func roundTrip(c net.Conn, r *bufio.Reader, line string) (string, error) {
	c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.WriteString(c, line+"\n"); err != nil {
		return "", err
	}
	got, err := r.ReadString('\n')
	if err != nil {
		return "", err
	}
	return got[:len(got)-1], nil
}

// TestCutResetsOpenConnectionsAndRefusesNew: bytes pass both ways; Cut
// ends a connection already open (its next read fails) and every
// connection made while cut; Restore lets new ones through again.
func TestCutResetsOpenConnectionsAndRefusesNew(t *testing.T) {
	t.Parallel()
	p, err := Listen(echoServer(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })

	c, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	r := bufio.NewReader(c)
	if got, err := roundTrip(c, r, "hello"); err != nil || got != "hello" {
		t.Fatalf("through the proxy: %q, %v", got, err)
	}
	if p.Open() != 1 || p.Accepted() != 1 {
		t.Fatalf("open %d, accepted %d; want 1 and 1", p.Open(), p.Accepted())
	}

	if n := p.Cut(); n != 1 {
		t.Fatalf("Cut reset %d connections, want 1", n)
	}
	if _, err := roundTrip(c, r, "after the cut"); err == nil {
		t.Fatal("a connection open before the cut still carries bytes")
	}
	c2, err := net.Dial("tcp", p.Addr())
	if err == nil {
		_, err = roundTrip(c2, bufio.NewReader(c2), "while cut")
		c2.Close()
	}
	if err == nil {
		t.Fatal("a connection made while cut carries bytes")
	}
	if p.Refused() != 1 || !p.IsCut() {
		t.Fatalf("refused %d (want 1), cut %v", p.Refused(), p.IsCut())
	}

	p.Restore()
	c3, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c3.Close()
	if got, err := roundTrip(c3, bufio.NewReader(c3), "again"); err != nil || got != "again" {
		t.Fatalf("after Restore: %q, %v", got, err)
	}
}

// TestTargetDown: a connection to a proxy whose target does not listen is
// reset and counted refused.
func TestTargetDown(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	p, err := Listen(addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	c, err := net.Dial("tcp", p.Addr())
	if err == nil {
		_, err = roundTrip(c, bufio.NewReader(c), "x")
		c.Close()
	}
	if err == nil {
		t.Fatal("bytes came back from a target that does not listen")
	}
	if p.Refused() != 1 || p.Accepted() != 0 {
		t.Fatalf("refused %d, accepted %d", p.Refused(), p.Accepted())
	}
}

// TestLoseReplyAfter: the chunk that springs the trap reaches the target,
// its client's connection fails without the reply, and the proxy is
// disarmed: the next connection carries bytes both ways again.
func TestLoseReplyAfter(t *testing.T) {
	t.Parallel()
	got := make(chan string, 1)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				r := bufio.NewReader(c)
				for {
					line, err := r.ReadString('\n')
					if err != nil {
						return
					}
					if line == "commit\n" {
						got <- line
					}
					io.WriteString(c, line)
				}
			}()
		}
	}()
	p, err := Listen(ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	p.LoseReplyAfter(func(b []byte) bool { return strings.Contains(string(b), "commit") })

	c, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	r := bufio.NewReader(c)
	if line, err := roundTrip(c, r, "begin"); err != nil || line != "begin" {
		t.Fatalf("before the trap: %q, %v", line, err)
	}
	if line, err := roundTrip(c, r, "commit"); err == nil {
		t.Fatalf("the reply to the trapped chunk came back: %q", line)
	}
	select {
	case <-got:
	case <-time.After(5 * time.Second):
		t.Fatal("the trapped chunk never reached the target")
	}
	c2, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()
	if line, err := roundTrip(c2, bufio.NewReader(c2), "commit"); err != nil || line != "commit" {
		t.Fatalf("after the trap sprang: %q, %v", line, err)
	}
}

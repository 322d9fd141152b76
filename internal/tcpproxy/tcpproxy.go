// Package tcpproxy is a TCP proxy that tests and the development harnesses
// put between a client and a server to cut the network between them: Cut
// resets every connection open through it and refuses new ones (each is
// accepted and reset at once) until Restore. Connections are copied byte
// for byte; the proxy knows nothing of what they carry.
//
// It is test tooling, not part of the product.
package tcpproxy

import (
	"errors"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// DialTimeout bounds the proxy's connection to its target.
const DialTimeout = 5 * time.Second

// Proxy forwards the connections it accepts to one target address.
type Proxy struct {
	ln     net.Listener
	target string

	mu     sync.Mutex
	cut    bool
	closed bool
	pairs  map[*pair]struct{}
	trap   func([]byte) bool // see LoseReplyAfter
	wg     sync.WaitGroup

	accepted, refused atomic.Int64
}

// pair is one client connection and its connection to the target.
type pair struct{ client, server net.Conn }

// Listen starts a proxy on a free port of 127.0.0.1 that forwards to
// target ("host:port").
func Listen(target string) (*Proxy, error) {
	return ListenOn("127.0.0.1:0", target)
}

// ListenOn starts a proxy listening on addr that forwards to target.
func ListenOn(addr, target string) (*Proxy, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	p := &Proxy{ln: ln, target: target, pairs: map[*pair]struct{}{}}
	p.wg.Add(1)
	go p.serve()
	return p, nil
}

// Addr is the proxy's "host:port", the address clients dial instead of
// the target's.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// Port is the port of Addr.
func (p *Proxy) Port() int { return p.ln.Addr().(*net.TCPAddr).Port }

// Target is the address the proxy forwards to.
func (p *Proxy) Target() string { return p.target }

// Cut resets every connection open through the proxy, both sides, and
// makes it refuse new ones until Restore. It returns how many connections
// it reset.
func (p *Proxy) Cut() int {
	p.mu.Lock()
	p.cut = true
	pairs := p.pairs
	p.pairs = map[*pair]struct{}{}
	p.mu.Unlock()
	for pr := range pairs {
		reset(pr.client)
		reset(pr.server)
	}
	return len(pairs)
}

// LoseReplyAfter arms the proxy once: the first chunk a client sends for
// which match reports true is still delivered to the target, but the
// client's connection is reset first and the target's closed (an orderly
// close) right after it, so the target acts on what it was sent and its
// reply is lost: a COMMIT that commits while its client sees the
// connection fail. A chunk is what one read of the client's connection
// returned.
func (p *Proxy) LoseReplyAfter(match func(chunk []byte) bool) {
	p.mu.Lock()
	p.trap = match
	p.mu.Unlock()
}

// sprung reports whether chunk springs the trap LoseReplyAfter set, and
// disarms it if so.
func (p *Proxy) sprung(chunk []byte) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.trap == nil || !p.trap(chunk) {
		return false
	}
	p.trap = nil
	return true
}

// Restore lets new connections through again after Cut.
func (p *Proxy) Restore() {
	p.mu.Lock()
	p.cut = false
	p.mu.Unlock()
}

// IsCut reports whether the proxy is cut.
func (p *Proxy) IsCut() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.cut
}

// Open is how many connections are open through the proxy now.
func (p *Proxy) Open() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.pairs)
}

// Accepted counts the connections forwarded; Refused those reset at once
// because the proxy was cut, or because the target could not be reached.
func (p *Proxy) Accepted() int64 { return p.accepted.Load() }

// Refused: see Accepted.
func (p *Proxy) Refused() int64 { return p.refused.Load() }

// Close stops listening and resets every open connection.
func (p *Proxy) Close() error {
	p.mu.Lock()
	p.closed = true
	p.mu.Unlock()
	err := p.ln.Close()
	p.Cut()
	p.wg.Wait()
	return err
}

func (p *Proxy) serve() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			time.Sleep(10 * time.Millisecond)
			continue
		}
		p.mu.Lock()
		refuse := p.cut || p.closed
		p.mu.Unlock()
		if refuse {
			p.refused.Add(1)
			reset(c)
			continue
		}
		p.wg.Add(1)
		go p.forward(c)
	}
}

// forward dials the target for client and copies both ways until either
// side ends, then closes both.
func (p *Proxy) forward(client net.Conn) {
	defer p.wg.Done()
	server, err := net.DialTimeout("tcp", p.target, DialTimeout)
	if err != nil {
		p.refused.Add(1)
		reset(client)
		return
	}
	pr := &pair{client: client, server: server}
	p.mu.Lock()
	if p.cut || p.closed {
		p.mu.Unlock()
		p.refused.Add(1)
		reset(client)
		reset(server)
		return
	}
	p.pairs[pr] = struct{}{}
	p.mu.Unlock()
	p.accepted.Add(1)

	done := make(chan struct{}, 2)
	go func() {
		p.toServer(server, client)
		done <- struct{}{}
	}()
	go func() {
		io.Copy(client, server)
		done <- struct{}{}
	}()
	<-done
	p.mu.Lock()
	delete(p.pairs, pr)
	p.mu.Unlock()
	client.Close()
	server.Close()
	<-done
}

// toServer copies what client sends to server until either fails, or
// until a chunk springs the trap of LoseReplyAfter.
func (p *Proxy) toServer(server, client net.Conn) {
	buf := make([]byte, 32<<10)
	for {
		n, err := client.Read(buf)
		if n > 0 {
			if p.sprung(buf[:n]) {
				reset(client)
				server.Write(buf[:n])
				server.Close()
				return
			}
			if _, werr := server.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// reset closes c with a TCP reset rather than an orderly one, as a cut
// link or a middlebox that drops the flow appears to the peer.
func reset(c net.Conn) {
	if tc, ok := c.(*net.TCPConn); ok {
		tc.SetLinger(0)
	}
	c.Close()
}

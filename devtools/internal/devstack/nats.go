package devstack

import (
	"context"
	"os"
	"path/filepath"
	"syscall"
	"time"
)

// NATS is a private NATS server with JetStream: devtools/cmd/natsd on its
// own port and store directory, which a restart keeps.
type NATS struct {
	Bin  string // the natsd binary
	Dir  string // holds store/ and natsd.log; made if missing
	Port int
	// HTTPPort, if set, serves the server's monitoring endpoints (/varz,
	// /connz, ...) on 127.0.0.1.
	HTTPPort int
	Started  int // how many times Start ran

	proc *Proc
}

// URL is the server's client URL.
func (n *NATS) URL() string { return "nats://" + Addr(n.Port) }

// Proc is the running (or last) natsd process; nil before Start.
func (n *NATS) Proc() *Proc { return n.proc }

// Start starts natsd on the store directory and waits up to 30s for its
// port.
func (n *NATS) Start(ctx context.Context) error {
	if err := os.MkdirAll(n.Dir, 0o755); err != nil {
		return err
	}
	args := []string{n.Bin, "-addr", Addr(n.Port), "-store-dir", filepath.Join(n.Dir, "store")}
	if n.HTTPPort > 0 {
		args = append(args, "-http", Addr(n.HTTPPort))
	}
	p, err := Start(Spec{Name: "natsd", LogPath: filepath.Join(n.Dir, "natsd.log"), Dir: n.Dir, Args: args})
	if err != nil {
		return err
	}
	n.proc = p
	n.Started++
	return WaitPort(ctx, n.Port, p, 30*time.Second)
}

// Stop shuts natsd down gracefully (SIGTERM), killing it after 20s.
func (n *NATS) Stop() {
	if n.proc != nil {
		n.proc.Stop(syscall.SIGTERM, 20*time.Second)
	}
}

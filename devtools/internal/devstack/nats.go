package devstack

import (
	"cmp"
	"context"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// NATS is a private NATS server with JetStream: devtools/cmd/natsd on its
// own port and store directory, which a restart keeps.
type NATS struct {
	Bin     string // the natsd binary
	Dir     string // holds store/ and natsd.log; made if missing
	Port    int
	Started int // how many times Start ran
	// HTTPPort, if set, serves the server's monitoring endpoints (/varz,
	// /connz, ...) on 127.0.0.1.
	HTTPPort int
	// Name, ClusterPort and Routes make the server one of a JetStream
	// cluster: its name (unique in the cluster), its cluster port, and
	// the cluster ports of every server (on 127.0.0.1). ClusterPort 0:
	// no cluster.
	Name        string
	ClusterPort int
	Routes      []int

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
	if n.ClusterPort != 0 {
		routes := make([]string, len(n.Routes))
		for i, r := range n.Routes {
			routes[i] = "nats-route://" + Addr(r)
		}
		args = append(args, "-name", n.Name, "-cluster", Addr(n.ClusterPort), "-routes", strings.Join(routes, ","))
	}
	if n.HTTPPort > 0 {
		args = append(args, "-http", Addr(n.HTTPPort))
	}
	p, err := Start(Spec{Name: cmp.Or(n.Name, "natsd"), LogPath: filepath.Join(n.Dir, "natsd.log"), Dir: n.Dir, Args: args})
	if err != nil {
		return err
	}
	n.proc = p
	n.Started++
	return WaitPort(ctx, n.Port, p, 30*time.Second)
}

// Kill kills natsd (SIGKILL), as a crash of its machine would, and waits
// for it to exit.
func (n *NATS) Kill() {
	if n.proc != nil {
		n.proc.Kill()
	}
}

// Stop shuts natsd down gracefully (SIGTERM), killing it after 20s.
func (n *NATS) Stop() {
	if n.proc != nil {
		n.proc.Stop(syscall.SIGTERM, 20*time.Second)
	}
}

package main

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/extractq/extractq/devtools/internal/devstack"
	"github.com/extractq/extractq/internal/tcpproxy"
	"github.com/extractq/extractq/queue"
)

// clusterSize is how many servers -cluster runs.
const clusterSize = 3

// proxySet is one link to NATS: a proxy per server (one for a single
// server, one per node of a cluster). Cutting it cuts every one.
type proxySet []*tcpproxy.Proxy

// url is the client URL of every server through the set, comma-separated,
// as NATS_URL lists a cluster.
func (s proxySet) url() string {
	us := make([]string, len(s))
	for i, p := range s {
		us[i] = "nats://" + p.Addr()
	}
	return strings.Join(us, ",")
}

func (s proxySet) Cut() int {
	n := 0
	for _, p := range s {
		n += p.Cut()
	}
	return n
}

func (s proxySet) Restore() {
	for _, p := range s {
		p.Restore()
	}
}

func (s proxySet) Refused() int64 {
	var n int64
	for _, p := range s {
		n += p.Refused()
	}
	return n
}

// cutter is a link that can be cut: a proxy, or a proxySet.
type cutter interface {
	Cut() int
	Restore()
	Refused() int64
}

// startNATS starts the run's NATS: one server, or with -cluster three
// servers routed to each other on loopback, each with its store. ports
// gives each server's client port.
func (h *harness) startNATS(ctx context.Context, ports []int) error {
	bin := filepath.Join(h.binDir, "natsd")
	if !h.o.Cluster {
		h.nodes = []*devstack.NATS{{Bin: bin, Dir: filepath.Join(h.dir, "nats"), Port: ports[0]}}
		if err := h.nodes[0].Start(ctx); err != nil {
			return err
		}
		h.logf("nats (devtools/cmd/natsd, JetStream) on 127.0.0.1:%d", ports[0])
		return nil
	}
	routes := make([]int, clusterSize)
	for i := range routes {
		var err error
		if routes[i], err = devstack.FreePort(); err != nil {
			return err
		}
	}
	for i := range clusterSize {
		h.nodes = append(h.nodes, &devstack.NATS{Bin: bin, Dir: filepath.Join(h.dir, fmt.Sprintf("nats-%d", i+1)), Port: ports[i],
			Name: fmt.Sprintf("n%d", i+1), ClusterPort: routes[i], Routes: routes})
	}
	for _, n := range h.nodes {
		if err := n.Start(ctx); err != nil {
			return err
		}
	}
	// The runs stream with its replicas, made here so that the workers
	// start on a cluster that has elected its leaders: a cluster just
	// formed refuses a stream of 3 replicas until every server reported.
	t := time.Now()
	err := h.withCluster(ctx, func(js jetstream.JetStream) error {
		return pollUntil(ctx, 90*time.Second, func() error {
			_, err := queue.EnsureStream(ctx, js, h.cfg.NATS)
			return err
		})
	})
	if err != nil {
		return fmt.Errorf("creating the runs stream on the cluster: %w", err)
	}
	leader, _ := h.streamLeader(ctx)
	h.logf("nats: a JetStream cluster of %d natsd servers (n1..n%d) on 127.0.0.1:%d,%d,%d, routes on loopback; stream %s has %d replicas, leader %s (%s to form)",
		clusterSize, clusterSize, ports[0], ports[1], ports[2], h.cfg.NATS.Stream, h.cfg.NATS.Replicas, leader, time.Since(t).Round(100*time.Millisecond))
	return nil
}

// natsURL is the client URL of every NATS server, direct (the harness's
// own connections).
func (h *harness) natsURL() string {
	us := make([]string, len(h.nodes))
	for i, n := range h.nodes {
		us[i] = n.URL()
	}
	return strings.Join(us, ",")
}

// withCluster calls f with a JetStream connection to every server.
func (h *harness) withCluster(ctx context.Context, f func(js jetstream.JetStream) error) error {
	nc, err := nats.Connect(h.natsURL(), nats.Name("extractq-chaos"), nats.MaxReconnects(-1), nats.ReconnectWait(100*time.Millisecond))
	if err != nil {
		return err
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	return f(js)
}

// streamLeader returns the name of the server that leads the runs
// stream now, asked of any server up.
func (h *harness) streamLeader(ctx context.Context) (string, error) {
	var leader string
	err := h.withCluster(ctx, func(js jetstream.JetStream) error {
		actx, cancel := context.WithTimeout(ctx, 3*time.Second)
		defer cancel()
		s, err := js.Stream(actx, h.cfg.NATS.Stream)
		if err != nil {
			return err
		}
		info, err := s.Info(actx)
		if err != nil {
			return err
		}
		if info.Cluster == nil || info.Cluster.Leader == "" {
			return fmt.Errorf("stream %s has no leader", h.cfg.NATS.Stream)
		}
		leader = info.Cluster.Leader
		return nil
	})
	return leader, err
}

// nodeNamed returns the index of the server named name, or -1.
func (h *harness) nodeNamed(name string) int {
	for i, n := range h.nodes {
		if n.Name == name {
			return i
		}
	}
	return -1
}

// waitLeader waits up to timeout for the runs stream to have a leader
// other than the servers in not, and returns its name.
func (h *harness) waitLeader(ctx context.Context, timeout time.Duration, not ...string) (string, error) {
	var leader string
	err := pollUntil(ctx, timeout, func() error {
		l, err := h.streamLeader(ctx)
		if err != nil {
			return err
		}
		for _, n := range not {
			if l == n {
				return fmt.Errorf("the leader is still %s", l)
			}
		}
		leader = l
		return nil
	})
	return leader, err
}

// killLeader is the cluster's fault: SIGKILL the runs stream's leader
// (asked of the cluster, not guessed), wait for the others to elect a new
// one, SIGKILL that one too (the cluster loses its quorum: no stream
// until one comes back), then start both again on their stores and wait
// for a leader with every replica current.
func (h *harness) killLeader(ctx context.Context, at string, e event) error {
	first, err := h.waitLeader(ctx, 30*time.Second)
	if err != nil {
		h.problem("%s: no stream leader to kill: %v", at, err)
		return nil
	}
	i := h.nodeNamed(first)
	h.logf("%s: SIGKILL the stream leader %s (pid %d)", at, first, h.nodes[i].Proc().Pid())
	t := time.Now()
	h.nodes[i].Kill()
	h.count("NATS stream leader SIGKILL")
	second, err := h.waitLeader(ctx, 60*time.Second, first)
	if err != nil {
		h.problem("no new stream leader within 60s of killing %s: %v", first, err)
		return nil
	}
	h.logf("stream leader %s elected %s after the SIGKILL of %s", second, time.Since(t).Round(100*time.Millisecond), first)
	if err := sleepCtx(ctx, e.Down); err != nil {
		return err
	}
	j := h.nodeNamed(second)
	h.logf("SIGKILL a second server, the new stream leader %s (pid %d): one of %d left, no quorum", second, h.nodes[j].Proc().Pid(), clusterSize)
	h.nodes[j].Kill()
	h.count("NATS second server SIGKILL")
	if err := sleepCtx(ctx, e.Down); err != nil {
		return err
	}
	for _, k := range []int{i, j} {
		if err := h.nodes[k].Start(ctx); err != nil {
			return fmt.Errorf("starting NATS %s again: %w", h.nodes[k].Name, err)
		}
	}
	leader, err := h.waitLeader(ctx, 90*time.Second)
	if err != nil {
		h.problem("no stream leader within 90s of starting %s and %s again: %v", first, second, err)
		return nil
	}
	h.logf("%s and %s started again on their stores %s after the first kill; stream leader %s",
		first, second, time.Since(t).Round(100*time.Millisecond), leader)
	return nil
}

// pollUntil calls f every 250ms until it returns nil, ctx is done or
// timeout passes (then f's last error).
func pollUntil(ctx context.Context, timeout time.Duration, f func() error) error {
	deadline := time.Now().Add(timeout)
	for {
		err := f()
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return err
		}
		if serr := sleepCtx(ctx, 250*time.Millisecond); serr != nil {
			return serr
		}
	}
}

package queue_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/zap"

	"github.com/extractq/extractq/config"
	"github.com/extractq/extractq/internal/testsignal"
	"github.com/extractq/extractq/queue"
	"github.com/extractq/extractq/queue/servertest"
)

// TestStreamReplicasOnCluster: on a private 3-server JetStream cluster,
// connected through the whole server list, EnsureStream makes the stream
// with nats.replicas copies and a leader (EnsureDeadLetter its dead-letter
// stream too), and raises an existing one-copy stream to 3 in place,
// keeping its messages.
func TestStreamReplicasOnCluster(t *testing.T) {
	t.Parallel()
	checkReplicas(t, servertest.ClusterURLs(servertest.StartCluster(t, 3)))
}

// TestStreamReplicasOnCluster29 is TestStreamReplicasOnCluster on three
// processes of the machine's nats-server (Debian's 2.9).
func TestStreamReplicasOnCluster29(t *testing.T) {
	t.Parallel()
	addrs := servertest.StartBinaryCluster(t, 3)
	urls := "nats://" + strings.Join(addrs, ",nats://")
	// The processes listen before their JetStream has elected a leader.
	testsignal.Eventually(t, 60*time.Second, "the cluster's JetStream", func() bool {
		nc, err := nats.Connect(urls)
		if err != nil {
			return false
		}
		defer nc.Close()
		js, err := jetstream.New(nc)
		if err != nil {
			return false
		}
		_, err = js.AccountInfo(t.Context())
		return err == nil
	})
	checkReplicas(t, urls)
}

func checkReplicas(t *testing.T, urls string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 90*time.Second)
	defer cancel()
	nc, js, err := queue.Connect(ctx, urls, "replicas-test", zap.NewNop())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	if got := len(nc.Servers()); got < 3 {
		t.Fatalf("the connection knows %d servers (%v), want the 3 listed", got, nc.Servers())
	}

	n := streamNames(config.NATS{}, "r3")
	n.Replicas = 3
	// A cluster just formed may not yet place three copies (insufficient
	// resources) until every server has reported in.
	testsignal.Eventually(t, 30*time.Second, "a stream of 3 replicas created", func() bool {
		_, err := queue.EnsureStream(ctx, js, n)
		return err == nil
	})
	if err := publishOne(t, js, n); err != nil {
		t.Fatal(err)
	}
	waitReplicas(t, js, n.Stream, 3)
	if _, err := queue.EnsureDeadLetter(ctx, js, n); err != nil {
		t.Fatal(err)
	}
	waitReplicas(t, js, queue.DeadLetterStreamName(n), 3)

	// A stream made with one copy, then configured with 3.
	n = streamNames(config.NATS{}, "r1")
	if err := publishOne(t, js, n); err != nil {
		t.Fatal(err)
	}
	waitReplicas(t, js, n.Stream, 1)
	n.Replicas = 3
	if _, err := queue.EnsureStream(ctx, js, n); err != nil {
		t.Fatalf("EnsureStream raising replicas 1 to 3: %v", err)
	}
	info := waitReplicas(t, js, n.Stream, 3)
	if info.State.Msgs != 1 {
		t.Fatalf("stream %s holds %d messages after its replicas changed, want 1", n.Stream, info.State.Msgs)
	}
}

// waitReplicas waits until the stream reports replicas copies: its
// configuration says so, it has a leader, and replicas-1 followers are
// current. It returns the last info.
func waitReplicas(t *testing.T, js jetstream.JetStream, stream string, replicas int) *jetstream.StreamInfo {
	t.Helper()
	var info *jetstream.StreamInfo
	testsignal.Eventually(t, 30*time.Second, "stream "+stream+" with a leader and all its replicas current", func() bool {
		s, err := js.Stream(t.Context(), stream)
		if err != nil {
			return false
		}
		if info, err = s.Info(t.Context()); err != nil || info.Cluster == nil || info.Cluster.Leader == "" {
			return false
		}
		current := 0
		for _, p := range info.Cluster.Replicas {
			if p.Current {
				current++
			}
		}
		return info.Config.Replicas == replicas && len(info.Cluster.Replicas) == replicas-1 && current == replicas-1
	})
	return info
}

// TestStreamReplicasOnOneServer: more than one replica on a server that
// is not clustered is an error naming nats.replicas.
func TestStreamReplicasOnOneServer(t *testing.T) {
	t.Parallel()
	srv := startServer(t, 0, t.TempDir())
	t.Cleanup(srv.Shutdown)
	nc, js, err := queue.Connect(t.Context(), srv.ClientURL(), "replicas-test", zap.NewNop())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	n := streamNames(config.NATS{}, "one")
	n.Replicas = 3
	_, err = queue.EnsureStream(t.Context(), js, n)
	if err == nil || !strings.Contains(err.Error(), "nats.replicas is 3") {
		t.Fatalf("EnsureStream with 3 replicas on one server: %v; want an error naming nats.replicas", err)
	}
}

// Package queuetest gives tests a private JetStream stream on the test
// NATS server, so tests run in parallel and never touch the demo's stream.
package queuetest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/zap"

	"github.com/extractq/extractq/config"
	"github.com/extractq/extractq/queue"
)

// URL is the test NATS server: NATS_URL, default nats://127.0.0.1:4222.
func URL() string {
	if u := os.Getenv("NATS_URL"); u != "" {
		return u
	}
	return "nats://127.0.0.1:4222"
}

// Bundle is a private stream and a connection to its server.
type Bundle struct {
	// NATS names the private stream, subject prefix and consumer.
	NATS config.NATS
	Conn *nats.Conn
	JS   jetstream.JetStream
}

// NewStream connects to URL() and creates a stream with unique names,
// deleted with the connection in t.Cleanup.
func NewStream(t testing.TB) *Bundle {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	nc, js, err := queue.Connect(ctx, URL(), "extractq-test", zap.NewNop())
	if err != nil {
		t.Fatalf("queuetest: connecting to %s: %v", URL(), err)
	}
	var b [5]byte
	rand.Read(b[:])
	suffix := hex.EncodeToString(b[:])
	n := config.Default().NATS
	n.Stream = "T_" + strings.ToUpper(suffix)
	n.SubjectPrefix = "t_" + suffix
	n.Consumer = "c_" + suffix
	if _, err := queue.EnsureStream(ctx, js, n); err != nil {
		nc.Close()
		t.Fatalf("queuetest: creating stream %s: %v", n.Stream, err)
	}
	t.Cleanup(func() {
		dctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := js.DeleteStream(dctx, n.Stream); err != nil {
			t.Logf("queuetest: deleting stream %s: %v", n.Stream, err)
		}
		nc.Close()
	})
	return &Bundle{NATS: n, Conn: nc, JS: js}
}

// Messages returns how many messages the stream holds.
func (b *Bundle) Messages(t testing.TB) uint64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s, err := b.JS.Stream(ctx, b.NATS.Stream)
	if err != nil {
		t.Fatalf("queuetest: stream %s: %v", b.NATS.Stream, err)
	}
	info, err := s.Info(ctx)
	if err != nil {
		t.Fatalf("queuetest: stream %s info: %v", b.NATS.Stream, err)
	}
	return info.State.Msgs
}

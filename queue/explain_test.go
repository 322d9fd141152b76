package queue_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"go.uber.org/zap"

	"github.com/extractq/extractq/config"
	"github.com/extractq/extractq/queue"
)

// A JetStream out of storage (its max_file_store reached, as with a full
// disk) refuses a publish with "insufficient resources", which Explain
// names, rather than a bare timeout.
func TestExplainOutOfStorage(t *testing.T) {
	t.Parallel()
	s, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: server.RANDOM_PORT, JetStream: true,
		JetStreamMaxStore: 256 << 10, StoreDir: t.TempDir(), NoSigs: true, NoLog: true})
	if err != nil {
		t.Fatal(err)
	}
	go s.Start()
	if !s.ReadyForConnections(10 * time.Second) {
		t.Fatal("embedded server not ready")
	}
	t.Cleanup(s.Shutdown)
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	nc, js, err := queue.Connect(ctx, s.ClientURL(), "queue-test", zap.NewNop())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	cfg := config.NATS{Stream: "FULLDISK", SubjectPrefix: "fulldisk", Consumer: "workers", DuplicateWindow: time.Minute}
	if _, err := queue.EnsureStream(ctx, js, cfg); err != nil {
		t.Fatal(err)
	}
	p := queue.NewPublisher(js, cfg)
	p.MaxRetries = 0
	big := strings.Repeat("x", 8<<10)
	for i := int64(1); ; i++ {
		env := queue.Envelope{MessageID: i, RunNo: 1, SchemaID: "s", BatchID: big}
		_, err := p.Publish(ctx, env.DedupID(), env)
		if err == nil {
			if i > 1000 {
				t.Fatal("1000 publishes of 8 KiB taken by a 256 KiB store")
			}
			continue
		}
		if !queue.IsOutOfStorage(err) || !queue.IsRetryable(err) || queue.IsStreamFull(err) {
			t.Fatalf("publish %d: %v; want insufficient resources, retryable", i, err)
		}
		if got := queue.Explain(err, cfg.Stream); !strings.HasPrefix(got, `NATS is out of storage: JetStream answered "insufficient resources" (error 10023)`) {
			t.Errorf("Explain = %s", got)
		}
		return
	}
}

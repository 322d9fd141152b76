package queue_test

import (
	"context"
	"net"
	"strconv"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/extractq/extractq/config"
	"github.com/extractq/extractq/internal/testsignal"
	"github.com/extractq/extractq/queue"
)

// startServer starts an embedded JetStream server on port (0: any free
// port) with its store in dir.
func startServer(t *testing.T, port int, dir string) *server.Server {
	t.Helper()
	if port == 0 {
		port = server.RANDOM_PORT
	}
	s, err := server.NewServer(&server.Options{
		Host: "127.0.0.1", Port: port, JetStream: true, StoreDir: dir, NoSigs: true, NoLog: true,
	})
	if err != nil {
		t.Fatal(err)
	}
	go s.Start()
	if !s.ReadyForConnections(10 * time.Second) {
		t.Fatal("embedded server not ready")
	}
	return s
}

// TestRunSurvivesServerRestart stops the server under a running consumer
// (its own embedded server, not the shared one) and starts it again: Run
// logs the failed fetches, keeps going, and handles what comes after.
func TestRunSurvivesServerRestart(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	srv := startServer(t, 0, dir)
	t.Cleanup(func() { srv.Shutdown() })
	_, portStr, _ := net.SplitHostPort(srv.Addr().String())
	port, _ := strconv.Atoi(portStr)

	ctx := t.Context()
	cfg := config.NATS{Stream: "RESTART", SubjectPrefix: "restart", Consumer: "workers", DuplicateWindow: time.Minute}
	nc, js, err := queue.Connect(ctx, srv.ClientURL(), "queue-test", zap.NewNop())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	if _, err := queue.EnsureStream(ctx, js, cfg); err != nil {
		t.Fatal(err)
	}
	c, err := queue.EnsureConsumer(ctx, js, cfg, config.Worker{Concurrency: 2, AckWait: time.Second, MaxDeliver: 3})
	if err != nil {
		t.Fatal(err)
	}
	p := queue.NewPublisher(js, cfg)
	handled := make(chan int64, 10)
	core, logs := observer.New(zap.WarnLevel)
	runCtx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- queue.Run(runCtx, c, func(ctx context.Context, d *queue.Delivery) queue.Decision {
			handled <- d.Envelope.MessageID
			return queue.Ack()
		}, queue.ConsumerOptions{Concurrency: 2, FetchWait: 500 * time.Millisecond, Log: zap.New(core)})
	}()
	t.Cleanup(func() { cancel(); <-done })

	publish := func(id int64) {
		t.Helper()
		env := queue.Envelope{MessageID: id, RunNo: 1, SchemaID: "s"}
		if _, err := p.Publish(ctx, env.DedupID(), env); err != nil {
			t.Fatalf("publish %d: %v", id, err)
		}
	}
	expect := func(id int64) {
		t.Helper()
		select {
		case got := <-handled:
			if got != id {
				t.Fatalf("handled %d, want %d", got, id)
			}
		case <-time.After(30 * time.Second):
			t.Fatalf("message %d not handled in 30s", id)
		}
	}

	publish(1)
	expect(1)
	// The handler's return is not the ack's arrival: shutting down before
	// the server has it would redeliver message 1 after the restart.
	testsignal.Eventually(t, 10*time.Second, "message 1's ack on the server", func() bool {
		info, err := c.Info(ctx)
		return err == nil && info.NumAckPending == 0 && info.AckFloor.Stream >= 1
	})

	srv.Shutdown()
	srv.WaitForShutdown()
	// Several fetch rounds against no server: a second failure logged shows
	// that Run went on after the first.
	failures := func() int { return logs.FilterMessage("fetch failed; retrying").Len() }
	testsignal.Eventually(t, 30*time.Second, "a second fetch failure logged with the server down", func() bool { return failures() >= 2 })
	select {
	case err := <-done:
		t.Fatalf("Run returned while the server was down: %v", err)
	default:
	}
	srv = startServer(t, port, dir)

	publish(2)
	expect(2)
}

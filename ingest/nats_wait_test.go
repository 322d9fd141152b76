package ingest_test

import (
	"context"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/extractq/extractq/config"
	"github.com/extractq/extractq/ingest"
	"github.com/extractq/extractq/ingest/ingesttest"
	"github.com/extractq/extractq/internal/testsignal"
	"github.com/extractq/extractq/queue"
	"github.com/extractq/extractq/queue/queuetest"
	"github.com/extractq/extractq/store/storetest"
)

// A stream that stays full, with no worker draining it, stops the ingest
// after nats.retry_time with an error naming the stream and what NATS
// answered. Before, it waited for ever, and said only "stream full and
// context deadline exceeded" when its context ended.
func TestRunStreamFullNamesIt(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	st := storetest.NewStore(t)
	q := queuetest.NewStream(t)
	q.NATS.MaxMsgs = 1
	if _, err := queue.EnsureStream(ctx, q.JS, q.NATS); err != nil {
		t.Fatal(err)
	}
	in, err := ingest.New(ingest.Config{Store: st, Publisher: queue.NewPublisher(q.JS, q.NATS), SchemaID: ingesttest.Schema,
		MaxTextBytes: ingesttest.MaxText, NATSRetryTime: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	sum, err := in.Run(ctx, strings.NewReader(ingesttest.GoodLines(2)))
	if ctx.Err() != nil {
		t.Fatalf("Run waited for its context: %v", err)
	}
	want := "NATS did not take the run for 1s: stream " + q.NATS.Stream + ` is full: JetStream answered "maximum messages exceeded"`
	if err == nil || !strings.Contains(err.Error(), want) || sum.Published != 1 {
		t.Fatalf("Run = %+v, %v\nwant 1 published, then an error saying %s", sum, err, want)
	}
}

// startNATS starts an embedded JetStream server on port (0: any) with its
// store in dir.
func startNATS(t *testing.T, port int, dir string) *server.Server {
	t.Helper()
	if port == 0 {
		port = server.RANDOM_PORT
	}
	s, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: port, JetStream: true, StoreDir: dir, NoSigs: true, NoLog: true})
	if err != nil {
		t.Fatal(err)
	}
	go s.Start()
	if !s.ReadyForConnections(10 * time.Second) {
		t.Fatal("embedded NATS not ready")
	}
	return s
}

// A NATS that goes away is waited out: the line's publish waits
// (saying so), and the ingest goes on once NATS is back. One that stays
// away stops the ingest after nats.retry_time, saying NATS is not
// connected, not "context deadline exceeded".
func TestRunWaitsOutNATS(t *testing.T) {
	t.Parallel()
	st := storetest.NewStore(t)
	dir := t.TempDir()
	srv := startNATS(t, 0, dir)
	_, portStr, _ := net.SplitHostPort(srv.Addr().String())
	port, _ := strconv.Atoi(portStr)
	url := srv.ClientURL()
	nc, js, err := queue.Connect(t.Context(), url, "ingest-test", zap.NewNop())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	cfg := config.NATS{Stream: "WAIT", SubjectPrefix: "wait", Consumer: "workers", DuplicateWindow: time.Minute}
	if _, err := queue.EnsureStream(t.Context(), js, cfg); err != nil {
		t.Fatal(err)
	}
	srv.Shutdown()
	srv.WaitForShutdown()

	// Away for good: stopped after the wait, saying why.
	in, err := ingest.New(ingest.Config{Store: st, Publisher: queue.NewPublisher(js, cfg), SchemaID: ingesttest.Schema,
		MaxTextBytes: ingesttest.MaxText, NATSRetryTime: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	_, err = in.Run(t.Context(), strings.NewReader(ingesttest.GoodLines(1)))
	if err == nil || !strings.Contains(err.Error(), "NATS did not take the run for 2s: not connected to NATS") {
		t.Errorf("NATS away: Run = %v, want it to say NATS is not connected", err)
	}
	if d := time.Since(start); d > 15*time.Second {
		t.Errorf("NATS away: Run took %v with a 2s nats.retry_time", d)
	}

	// Back while the line waits: ingested.
	core, logs := observer.New(zap.WarnLevel)
	in, err = ingest.New(ingest.Config{Store: st, Publisher: queue.NewPublisher(js, cfg), SchemaID: ingesttest.Schema,
		MaxTextBytes: ingesttest.MaxText, NATSRetryTime: time.Minute, Logger: zap.New(core)})
	if err != nil {
		t.Fatal(err)
	}
	type result struct {
		sum ingest.Summary
		err error
	}
	done := make(chan result, 1)
	runStart := time.Now()
	go func() {
		sum, err := in.Run(t.Context(), strings.NewReader(ingesttest.GoodLines(3)))
		done <- result{sum, err}
	}()
	testsignal.Eventually(t, 30*time.Second, "ingest to say it waits for NATS", func() bool {
		return logs.FilterMessage("NATS does not take the run; waiting").Len() > 0
	})
	// At once, not after a publish attempt that waited in nats.go's
	// reconnect buffer for an acknowledgement (publishAttempt, 10s).
	if d := time.Since(runStart); d > 5*time.Second {
		t.Errorf("NATS away: ingest said it waits %v after the run began, want at once", d)
	}
	srv = startNATS(t, port, dir)
	t.Cleanup(srv.Shutdown)
	r := <-done
	if r.err != nil || r.sum.Published+r.sum.Duplicates != 3 {
		t.Fatalf("NATS back: Run = %+v, %v; want all 3 lines in", r.sum, r.err)
	}
}

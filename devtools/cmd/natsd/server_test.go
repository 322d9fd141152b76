package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/zap/zaptest"
)

func TestRun(t *testing.T) {
	t.Parallel()

	t.Run("ServesJetStreamAndShutsDown", func(t *testing.T) {
		t.Parallel()
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()

		urls := make(chan string, 1)
		done := make(chan error, 1)
		go func() {
			done <- run(ctx, params{
				Addr:     "127.0.0.1:0",
				StoreDir: t.TempDir(),
				Logger:   zaptest.NewLogger(t),
			}, func(u string) { urls <- u })
		}()
		var url string
		select {
		case url = <-urls:
		case err := <-done:
			t.Fatalf("run returned before ready: %v", err)
		case <-time.After(15 * time.Second):
			t.Fatal("server not ready")
		}

		nc, err := nats.Connect(url)
		if err != nil {
			t.Fatal(err)
		}
		defer nc.Close()
		js, err := jetstream.New(nc)
		if err != nil {
			t.Fatal(err)
		}
		name := fmt.Sprintf("NATSD_TEST_%d", rand.Int64())
		if _, err := js.CreateStream(ctx, jetstream.StreamConfig{
			Name:     name,
			Subjects: []string{name + ".>"},
			Storage:  jetstream.FileStorage,
		}); err != nil {
			t.Fatal(err)
		}
		// The second publish with the same id is a duplicate, so the
		// stream holds one message.
		for range 2 {
			if _, err := js.Publish(ctx, name+".a", []byte("x"), jetstream.WithMsgID("m-1")); err != nil {
				t.Fatal(err)
			}
		}
		st, err := js.Stream(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		info, err := st.Info(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if info.State.Msgs != 1 {
			t.Fatalf("stream holds %d messages, want 1", info.State.Msgs)
		}

		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Fatalf("run: %v", err)
			}
		case <-time.After(15 * time.Second):
			t.Fatal("run did not return after cancel")
		}
	})

	t.Run("PortTaken", func(t *testing.T) {
		t.Parallel()
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer ln.Close()
		err = run(context.Background(), params{
			Addr:         ln.Addr().String(),
			StoreDir:     t.TempDir(),
			ReadyTimeout: time.Second,
			Logger:       zaptest.NewLogger(t),
		}, func(string) { t.Error("ready called") })
		if err == nil {
			t.Fatal("run on a taken port returned nil")
		}
	})

	t.Run("BadAddr", func(t *testing.T) {
		t.Parallel()
		for _, addr := range []string{"4222", "127.0.0.1:x", "127.0.0.1:70000"} {
			_, err := serverOptions(params{Addr: addr, StoreDir: "d"})
			if err == nil {
				t.Errorf("addr %q accepted", addr)
			}
		}
	})
}

// TestServerOptionsCluster: -cluster, -routes and -name make a cluster
// member that does not advertise the cluster's addresses to clients; a bad
// route or cluster address is an error naming the flag.
func TestServerOptionsCluster(t *testing.T) {
	t.Parallel()
	opts, err := serverOptions(params{Addr: "127.0.0.1:4222", StoreDir: "d", Name: "n2", ClusterAddr: "127.0.0.1:6222",
		Routes: []string{"nats-route://127.0.0.1:6222", "nats-route://127.0.0.1:6223"}})
	if err != nil {
		t.Fatal(err)
	}
	if opts.ServerName != "n2" || opts.Cluster.Name != "extractq" || opts.Cluster.Port != 6222 || !opts.Cluster.NoAdvertise ||
		len(opts.Routes) != 2 || opts.Routes[1].Host != "127.0.0.1:6223" {
		t.Fatalf("options %+v, cluster %+v, routes %v", opts, opts.Cluster, opts.Routes)
	}
	if opts, err := serverOptions(params{Addr: "127.0.0.1:4222", StoreDir: "d"}); err != nil || opts.Cluster.Port != 0 || opts.ServerName != "extractq-natsd" {
		t.Fatalf("without -cluster: %+v, %v", opts, err)
	}
	for _, p := range []params{
		{Addr: "127.0.0.1:4222", StoreDir: "d", ClusterAddr: "nohost"},
		{Addr: "127.0.0.1:4222", StoreDir: "d", ClusterAddr: "127.0.0.1:6222", Routes: []string{"::bad"}},
	} {
		if _, err := serverOptions(p); err == nil {
			t.Errorf("%+v: no error", p)
		}
	}
}

// Command natsd runs a small NATS server with JetStream, for machines that
// have no NATS server of their own (development, the demo, CI).
//
// Usage:
//
//	natsd [-addr 127.0.0.1:4222] [-store-dir DIR] [-http ADDR] [-debug]
//	      [-name N -cluster HOST:PORT -routes nats-route://HOST:PORT,...]
//
// JetStream data is kept in -store-dir, by default
// $XDG_STATE_HOME/extractq/natsd, or extractq-natsd under the system's
// temporary directory when XDG_STATE_HOME is unset. -http serves the NATS
// monitoring endpoints (/varz, /jsz), off by default. SIGINT or SIGTERM
// shuts the server down gracefully. With -cluster the server joins a
// JetStream cluster through -routes (each server a distinct -name); the
// cluster's addresses are not advertised to clients. It is not a
// production server: run a real NATS deployment there.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"

	"go.uber.org/zap"
)

func main() {
	var p params
	flag.StringVar(&p.Addr, "addr", "127.0.0.1:4222", "client listen address, host:port (port 0 picks a free one)")
	flag.StringVar(&p.StoreDir, "store-dir", defaultStoreDir(), "JetStream storage directory")
	flag.StringVar(&p.HTTPAddr, "http", "", "monitoring listen address, host:port; empty turns it off")
	flag.BoolVar(&p.Debug, "debug", false, "log the server's debug lines")
	flag.StringVar(&p.Name, "name", "extractq-natsd", "server name (unique in a cluster)")
	flag.StringVar(&p.ClusterAddr, "cluster", "", "cluster listen address, host:port; empty: no cluster")
	flag.StringVar(&p.ClusterName, "cluster-name", "extractq", "cluster name (with -cluster)")
	routes := flag.String("routes", "", "comma-separated route URLs of the cluster's servers, nats-route://host:port (with -cluster)")
	flag.Parse()
	if *routes != "" {
		p.Routes = strings.Split(*routes, ",")
	}

	logCfg := zap.NewProductionConfig()
	if p.Debug {
		logCfg.Level = zap.NewAtomicLevelAt(zap.DebugLevel)
	}
	logger, err := logCfg.Build()
	if err != nil {
		fmt.Fprintln(os.Stderr, "natsd:", err)
		os.Exit(1)
	}
	defer logger.Sync() //nolint:errcheck // nothing to do about a failed flush at exit
	p.Logger = logger.Named("natsd")

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, p, nil); err != nil {
		p.Logger.Error("natsd stopped", zap.Error(err))
		logger.Sync() //nolint:errcheck
		os.Exit(1)
	}
}

// defaultStoreDir is $XDG_STATE_HOME/extractq/natsd, or extractq-natsd in
// the temporary directory.
func defaultStoreDir() string {
	if d := os.Getenv("XDG_STATE_HOME"); d != "" {
		return filepath.Join(d, "extractq", "natsd")
	}
	return filepath.Join(os.TempDir(), "extractq-natsd")
}

package main

import (
	"cmp"
	"context"
	"fmt"
	"net"
	"net/url"
	"strconv"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"go.uber.org/zap"
)

// params configures run.
type params struct {
	// Addr is the client listen address, host:port. Port 0 picks a free
	// port.
	Addr string
	// StoreDir is the JetStream storage directory, created if missing.
	StoreDir string
	// HTTPAddr is the monitoring listen address; empty turns it off.
	HTTPAddr string
	// Debug logs the server's debug lines.
	Debug bool
	// Name is the server's name, unique in a cluster; default
	// "extractq-natsd".
	Name string
	// ClusterAddr, when set, is the cluster listen address, host:port:
	// the server joins the JetStream cluster ClusterName through Routes.
	ClusterAddr string
	// ClusterName names the cluster; default "extractq".
	ClusterName string
	// Routes are the cluster's route URLs (nats-route://host:port), its
	// own included or not.
	Routes []string
	// ReadyTimeout bounds how long the server may take to accept clients.
	// Default 10s.
	ReadyTimeout time.Duration
	// Logger receives the server's log lines. Required.
	Logger *zap.Logger
}

// run starts the server, calls ready (if not nil) with the client URL once
// it accepts connections, and serves until ctx is done; then it shuts the
// server down and waits for it. It returns an error when an address is bad
// or the server does not become ready within p.ReadyTimeout (for example
// because the port is taken).
func run(ctx context.Context, p params, ready func(clientURL string)) error {
	p.ReadyTimeout = cmp.Or(p.ReadyTimeout, 10*time.Second)
	opts, err := serverOptions(p)
	if err != nil {
		return err
	}
	s, err := server.NewServer(opts)
	if err != nil {
		return fmt.Errorf("natsd: new server: %w", err)
	}
	s.SetLoggerV2(serverLogger{p.Logger.Named("nats_server").WithOptions(zap.WithCaller(false))}, p.Debug, false, false)
	go s.Start()
	if !s.ReadyForConnections(p.ReadyTimeout) {
		s.Shutdown()
		s.WaitForShutdown()
		return fmt.Errorf("natsd: not ready on %s within %s", p.Addr, p.ReadyTimeout)
	}
	url := s.ClientURL()
	p.Logger.Info("natsd ready",
		zap.String("client_url", url),
		zap.String("store_dir", opts.StoreDir),
		zap.Bool("jetstream", s.JetStreamEnabled()))
	if ready != nil {
		ready(url)
	}

	<-ctx.Done()
	p.Logger.Info("natsd shutting down")
	s.Shutdown()
	s.WaitForShutdown()
	p.Logger.Info("natsd stopped")
	return nil
}

// serverOptions turns params into the server's options.
func serverOptions(p params) (*server.Options, error) {
	host, port, err := splitHostPort(p.Addr)
	if err != nil {
		return nil, fmt.Errorf("natsd: -addr %q: %w", p.Addr, err)
	}
	if p.StoreDir == "" {
		return nil, fmt.Errorf("natsd: -store-dir is empty")
	}
	opts := &server.Options{
		ServerName: cmp.Or(p.Name, "extractq-natsd"),
		Host:       host,
		Port:       port,
		JetStream:  true,
		StoreDir:   p.StoreDir,
		NoSigs:     true, // run handles signals
	}
	if p.ClusterAddr != "" {
		if opts.Cluster.Host, opts.Cluster.Port, err = splitHostPort(p.ClusterAddr); err != nil {
			return nil, fmt.Errorf("natsd: -cluster %q: %w", p.ClusterAddr, err)
		}
		opts.Cluster.Name = cmp.Or(p.ClusterName, "extractq")
		// Clients know only the servers they were given (a harness puts
		// proxies in front of them), not the cluster's own addresses.
		opts.Cluster.NoAdvertise = true
		for _, r := range p.Routes {
			u, err := url.Parse(r)
			if err != nil || u.Host == "" {
				return nil, fmt.Errorf("natsd: -routes: bad route URL %q", r)
			}
			opts.Routes = append(opts.Routes, u)
		}
	}
	if p.HTTPAddr != "" {
		if opts.HTTPHost, opts.HTTPPort, err = splitHostPort(p.HTTPAddr); err != nil {
			return nil, fmt.Errorf("natsd: -http %q: %w", p.HTTPAddr, err)
		}
	}
	return opts, nil
}

// splitHostPort parses host:port; port 0 becomes the server's "any free
// port".
func splitHostPort(addr string) (string, int, error) {
	host, ps, err := net.SplitHostPort(addr)
	if err != nil {
		return "", 0, err
	}
	port, err := strconv.Atoi(ps)
	if err != nil || port < 0 || port > 65535 {
		return "", 0, fmt.Errorf("bad port %q", ps)
	}
	if port == 0 {
		port = server.RANDOM_PORT
	}
	return host, port, nil
}

// serverLogger adapts zap to the server's Logger interface. Fatal lines
// are logged as errors: run notices that the server did not become ready
// and returns an error instead of exiting.
type serverLogger struct{ l *zap.Logger }

var _ server.Logger = serverLogger{}

func (s serverLogger) Noticef(format string, v ...any) { s.l.Info(fmt.Sprintf(format, v...)) }
func (s serverLogger) Warnf(format string, v ...any)   { s.l.Warn(fmt.Sprintf(format, v...)) }
func (s serverLogger) Fatalf(format string, v ...any)  { s.l.Error(fmt.Sprintf(format, v...)) }
func (s serverLogger) Errorf(format string, v ...any)  { s.l.Error(fmt.Sprintf(format, v...)) }
func (s serverLogger) Debugf(format string, v ...any)  { s.l.Debug(fmt.Sprintf(format, v...)) }
func (s serverLogger) Tracef(format string, v ...any)  { s.l.Debug(fmt.Sprintf(format, v...)) }

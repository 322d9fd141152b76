package cmdconfig_test

import (
	"context"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"net"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/extractq/extractq/cmd/internal/cmdconfig"
	"github.com/extractq/extractq/config"
	"github.com/extractq/extractq/internal/startup"
	"github.com/extractq/extractq/provider"
	"github.com/extractq/extractq/queue"
	"github.com/extractq/extractq/queue/servertest"
	"github.com/extractq/extractq/store/storetest"
)

// deadURL is a loopback URL nothing listens on.
func deadURL(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return "nats://" + addr
}

// TestConnectNATSServerList: a comma-separated NATS_URL reaches
// nats.Connect whole. The one live server is listed last, after two that
// are down, so using only the first URL would never connect.
func TestConnectNATSServerList(t *testing.T) {
	t.Parallel()
	srv := servertest.Start(t, "")
	live := servertest.URL(srv, "nats")
	env := startup.Env{NATSURL: deadURL(t) + ", " + deadURL(t) + "," + live}
	nc, _, err := cmdconfig.ConnectNATS(t.Context(), env, config.Default().NATS, "cmdconfig-test", zap.NewNop(), 30*time.Second)
	if err != nil {
		t.Fatalf("ConnectNATS(%s): %v", env.NATSURL, err)
	}
	defer nc.Close()
	if nc.ConnectedUrl() != live {
		t.Errorf("connected to %s, want %s", nc.ConnectedUrl(), live)
	}
	if got := len(nc.Servers()); got != 3 {
		t.Errorf("the connection knows %d servers %v, want the 3 of NATS_URL", got, nc.Servers())
	}
}

// TestConnectNATSSecured: a server that requires both TLS with a client
// certificate and a user's credentials file (operator mode). The files
// come from the NATS_* variables through startup.LoadConfig, as every
// command loads its configuration; with them a command connects, makes
// its stream and publishes; without them, or with a bad file, the error
// names the step and the problem.
func TestConnectNATSSecured(t *testing.T) {
	t.Parallel()
	pki := servertest.NewPKI(t, "prod")
	op := servertest.NewOperator(t)
	op.Account(t, "APP", true)
	srv := servertest.Start(t, pki.TLSBlock(true)+op.ConfigBlock(t))
	env := startup.Env{NATSURL: servertest.URL(srv, "tls"), NATSCreds: op.UserCreds(t, "APP"),
		NATSCA: pki.CAFile, NATSCert: pki.ClientCert, NATSKey: pki.ClientKey}

	cfg, err := startup.LoadConfig("", env)
	if err != nil {
		t.Fatal(err)
	}
	cfg.NATS.Stream, cfg.NATS.SubjectPrefix = "SECURED", "secured"
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	nc, js, err := cmdconfig.ConnectNATS(ctx, env, cfg.NATS, "cmdconfig-test", zap.NewNop(), 20*time.Second)
	if err != nil {
		t.Fatalf("ConnectNATS with the right files: %v", err)
	}
	defer nc.Close()
	if err := cmdconfig.EnsureStream(ctx, zap.NewNop(), js, cfg.NATS); err != nil {
		t.Fatal(err)
	}
	e := queue.Envelope{MessageID: 1, RunNo: 1, BatchID: "b", SchemaID: "customer_message"}
	if _, err := queue.NewPublisher(js, cfg.NATS).Publish(ctx, e.DedupID(), e); err != nil {
		t.Fatalf("publish: %v", err)
	}

	missingCA := filepath.Join(t.TempDir(), "ca.pem")
	for name, c := range map[string]struct {
		edit func(*config.NATS)
		want string
	}{
		"noCredentials": {func(n *config.NATS) { n.CredentialsFile = "" }, "authorization violation"},
		"noClientCert":  {func(n *config.NATS) { n.TLS.CertFile, n.TLS.KeyFile = "", "" }, "nats.tls.cert_file and nats.tls.key_file"},
		"missingCA":     {func(n *config.NATS) { n.TLS.CAFile = missingCA }, "nats.tls.ca_file " + missingCA + ": no such file"},
	} {
		n := cfg.NATS
		c.edit(&n)
		_, _, err := cmdconfig.ConnectNATS(ctx, env, n, "cmdconfig-test", zap.NewNop(), 20*time.Second)
		step, cause := cmdconfig.Step(err)
		if step != cmdconfig.StepConnectNATS || cause == nil || !strings.Contains(strings.ToLower(cause.Error()), strings.ToLower(c.want)) ||
			strings.Contains(cause.Error(), "deadline exceeded") {
			t.Errorf("%s: step %q, error %v; want %q, %q and no wait for the deadline", name, step, cause, cmdconfig.StepConnectNATS, c.want)
		}
	}
}

// TestCommandsConnectThroughConnectNATS: no command dials NATS on its
// own, so every one gets the server list and the security options of
// ConnectNATS.
func TestCommandsConnectThroughConnectNATS(t *testing.T) {
	t.Parallel()
	root := filepath.Join("..", "..")
	var users []string
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") ||
			strings.Contains(path, filepath.Join("internal", "cmdconfig")) {
			return err
		}
		f, err := parser.ParseFile(token.NewFileSet(), path, nil, 0)
		if err != nil {
			return err
		}
		ast.Inspect(f, func(n ast.Node) bool {
			sel, ok := n.(*ast.SelectorExpr)
			if !ok {
				return true
			}
			pkg, ok := sel.X.(*ast.Ident)
			if !ok {
				return true
			}
			switch call := pkg.Name + "." + sel.Sel.Name; call {
			case "queue.Connect", "nats.Connect", "nats.NewConn", "jetstream.New":
				t.Errorf("%s calls %s: commands connect with cmdconfig.ConnectNATS", path, call)
			case "cmdconfig.ConnectNATS":
				users = append(users, filepath.Dir(path))
			}
			return true
		})
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	// The commands that use NATS, so the walk is known to have looked.
	for _, cmd := range []string{"ingest", "worker", "triage"} {
		if !slices.Contains(users, filepath.Join(root, cmd)) {
			t.Errorf("cmd/%s does not call cmdconfig.ConnectNATS (callers: %s)", cmd, fmt.Sprint(users))
		}
	}
}

// TestOpenStoreBudget: OpenStore sizes the pool from the connection
// budget, and a command the budget gives no share stops at the opening
// step, naming the key.
func TestOpenStoreBudget(t *testing.T) {
	ctx := context.Background()
	env := startup.Env{DatabaseURL: storetest.BaseURL()}
	budget := config.Postgres{MaxConnections: 50, Reserve: 6, Pools: map[string]config.PoolShare{"worker": {Share: 50, MaxReplicas: 4}}}
	st, err := cmdconfig.OpenStore(ctx, env, zap.NewNop(), cmdconfig.StoreOptions{Unmigrated: true, Command: "worker", Budget: budget})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if n := st.Pool.Config().MaxConns; n != 5 { // 44 × 50% ÷ 4
		t.Errorf("worker pool %d; want 5", n)
	}
	_, err = cmdconfig.OpenStore(ctx, env, zap.NewNop(), cmdconfig.StoreOptions{Unmigrated: true, Command: "triage", Budget: budget})
	step, cause := cmdconfig.Step(err)
	if step != cmdconfig.StepOpenStore || cause == nil || !strings.Contains(cause.Error(), "postgres.pools.triage: no share of the connection budget") {
		t.Errorf("triage without a share: step %q, %v", step, cause)
	}
}

// TestShareLimit: two worker processes' Transports, wired by ShareLimit
// to one NATS server, take half the limit each, and one's breaker
// opening (a provider answering 401) pauses the other without it calling.
func TestShareLimit(t *testing.T) {
	srv := servertest.Start(t, "")
	nc, js, err := queue.Connect(context.Background(), servertest.URL(srv, "nats"), "share-test", zap.NewNop())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	cfg := config.Default()
	cfg.Provider.RequestsPerMinute = 600
	cfg.Provider.BreakerFailures = 1
	cfg.Provider.ShareHeartbeat = 100 * time.Millisecond
	var calls atomic.Int32
	down := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusUnauthorized)
		fmt.Fprint(w, `{"error":{"message":"bad key","type":"invalid_request_error","code":"invalid_api_key"}}`)
	}))
	defer down.Close()
	var trs []*provider.Transport
	for range 2 {
		tr := provider.New(cfg.Provider, nil, nil, nil)
		stop, err := cmdconfig.ShareLimit(context.Background(), cfg, nc, js, tr, zap.NewNop())
		if err != nil {
			t.Fatal(err)
		}
		defer stop()
		trs = append(trs, tr)
	}
	waitUntil(t, "each replica at half the limit", func() bool { return trs[0].Share() == 0.5 && trs[1].Share() == 0.5 })

	req, _ := http.NewRequest(http.MethodPost, down.URL+"/v1/chat/completions", strings.NewReader(`{"model":"m","messages":[]}`))
	if _, err := trs[0].RoundTrip(req); provider.Class(err) != provider.ClassCredentials {
		t.Fatalf("first replica's call: %v, want credentials", err)
	}
	waitUntil(t, "the second replica paused", func() bool { return trs[1].State() == provider.BreakerOpen })
	if st := trs[1].BreakerStatus(); st.Cause != provider.ClassCredentials || calls.Load() != 1 {
		t.Errorf("second replica: %+v after %d calls; want open by credentials, one call in all", st, calls.Load())
	}
}

func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestNATSFileErrorNamesVariable: a bad security file set by a NATS_*
// variable is named with the variable; set in the configuration, with
// its key only.
func TestNATSFileErrorNamesVariable(t *testing.T) {
	t.Parallel()
	missing := filepath.Join(t.TempDir(), "nope.creds")
	env := startup.Env{NATSURL: deadURL(t), NATSCreds: missing}
	cfg, err := startup.LoadConfig("", env)
	if err != nil {
		t.Fatal(err)
	}
	_, _, err = cmdconfig.ConnectNATS(t.Context(), env, cfg.NATS, "cmdconfig-test", zap.NewNop(), time.Second)
	if want := "nats.credentials_file (set by NATS_CREDS) " + missing + ": no such file"; err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("NATS_CREDS missing: %v, want %q", err, want)
	}
	// The same file from the configuration: no variable to name.
	n := config.Default().NATS
	n.CredentialsFile = missing
	_, _, err = cmdconfig.ConnectNATS(t.Context(), startup.Env{NATSURL: env.NATSURL}, n, "cmdconfig-test", zap.NewNop(), time.Second)
	if want := "nats.credentials_file " + missing + ": no such file"; err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("nats.credentials_file missing: %v, want %q", err, want)
	}
	// TLS files from the variables too.
	env = startup.Env{NATSURL: env.NATSURL, NATSCA: missing}
	if cfg, err = startup.LoadConfig("", env); err != nil {
		t.Fatal(err)
	}
	_, _, err = cmdconfig.ConnectNATS(t.Context(), env, cfg.NATS, "cmdconfig-test", zap.NewNop(), time.Second)
	if want := "nats.tls.ca_file (set by NATS_CA) " + missing; err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("NATS_CA missing: %v, want %q", err, want)
	}
}

package queue_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/zap"

	"github.com/extractq/extractq/config"
	"github.com/extractq/extractq/queue"
	"github.com/extractq/extractq/queue/servertest"
)

// secCase is one client configuration against a secured server: want ""
// means it connects and a publish is stored; else the error must hold
// every part of want (separated by "|").
type secCase struct {
	name string
	n    config.NATS
	want string
}

func runSecCases(t *testing.T, url string, cases []secCase) {
	t.Helper()
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			err := connectAndPublish(t, url, streamNames(c.n, c.name))
			switch {
			case c.want == "" && err != nil:
				t.Fatalf("want a connection and a stored publish, got %v", err)
			case c.want == "":
			case err == nil:
				t.Fatalf("connected; want an error naming %q", c.want)
			default:
				for _, w := range strings.Split(c.want, "|") {
					if !strings.Contains(strings.ToLower(err.Error()), strings.ToLower(w)) {
						t.Errorf("error %q\ndoes not name %q", err, w)
					}
				}
				if strings.Contains(err.Error(), "deadline exceeded") {
					t.Errorf("error %q waited out its deadline: a refusal must not be retried", err)
				}
				// A failed dial ("N attempts over") is here a refusal, and
				// IsRefused says so; a bad file (caught before dialling)
				// or JetStream missing (after) is not one.
				if dial := strings.Contains(err.Error(), "attempts over"); dial != queue.IsRefused(err) {
					t.Errorf("IsRefused(%q) = %v, want %v", err, !dial, dial)
				}
			}
		})
	}
}

// TestTLSClientCertificate runs a server that requires TLS with a client
// certificate (verify: true) signed by a CA the test makes.
func TestTLSClientCertificate(t *testing.T) {
	t.Parallel()
	pki := servertest.NewPKI(t, "right")
	other := servertest.NewPKI(t, "other")
	srv := servertest.Start(t, pki.TLSBlock(true))
	right := config.NATSTLS{CAFile: pki.CAFile, CertFile: pki.ClientCert, KeyFile: pki.ClientKey}
	runSecCases(t, servertest.URL(srv, "tls"), []secCase{
		{"right", config.NATS{TLS: right}, ""},
		{"wrongCA", config.NATS{TLS: config.NATSTLS{CAFile: other.CAFile, CertFile: pki.ClientCert, KeyFile: pki.ClientKey}},
			"not signed by a CA this client trusts|nats.tls.ca_file|x509: certificate signed by unknown authority"},
		{"systemRoots", config.NATS{TLS: config.NATSTLS{CertFile: pki.ClientCert, KeyFile: pki.ClientKey}},
			"nats.tls.ca_file|unknown authority"},
		{"noClientCert", config.NATS{TLS: config.NATSTLS{CAFile: pki.CAFile}},
			"client certificate|nats.tls.cert_file"},
		{"clientCertOfAnotherCA", config.NATS{TLS: config.NATSTLS{CAFile: pki.CAFile, CertFile: other.ClientCert, KeyFile: other.ClientKey}},
			"nats.tls.cert_file|signed by a CA"},
	})
	// nats:// with the files set still speaks TLS: the files turn it on.
	runSecCases(t, servertest.URL(srv, "nats"), []secCase{{"natsScheme", config.NATS{TLS: right}, ""}})
}

// TestCredentialsFile runs a server in operator mode (a MEMORY resolver
// with the accounts preloaded; JetStream for APP, not for NOJS) that takes
// users by their credentials file only.
func TestCredentialsFile(t *testing.T) {
	t.Parallel()
	op := servertest.NewOperator(t)
	op.Account(t, "APP", true)
	op.Account(t, "NOJS", false)
	stranger := servertest.NewOperator(t)
	stranger.Account(t, "APP", true)
	srv := servertest.Start(t, op.ConfigBlock(t))

	right := op.UserCreds(t, "APP")
	// A creds file whose seed is another user's: the JWT of one, the
	// seed of the other.
	mixed := filepath.Join(t.TempDir(), "mixed.creds")
	a, b := readText(t, right), readText(t, op.UserCreds(t, "APP"))
	seedAt := strings.Index(b, "-----BEGIN USER NKEY SEED-----")
	writeText(t, mixed, a[:strings.Index(a, "-----BEGIN USER NKEY SEED-----")]+b[seedAt:])
	onlyJWT := filepath.Join(t.TempDir(), "jwt-only.creds")
	writeText(t, onlyJWT, a[:strings.Index(a, "-----BEGIN USER NKEY SEED-----")])

	runSecCases(t, servertest.URL(srv, "nats"), []secCase{
		{"right", config.NATS{CredentialsFile: right}, ""},
		{"anotherOperatorsAccount", config.NATS{CredentialsFile: stranger.UserCreds(t, "APP")},
			"the server refused this client's user|nats.credentials_file|account is known to the server|authorization violation"},
		{"accountWithoutJetStream", config.NATS{CredentialsFile: op.UserCreds(t, "NOJS")},
			"jetstream account|jetstream not enabled"},
		{"seedOfAnotherUser", config.NATS{CredentialsFile: mixed},
			"nats.credentials_file " + mixed + ": the NKey seed is not the user JWT's"},
		{"noSeed", config.NATS{CredentialsFile: onlyJWT}, "nats.credentials_file " + onlyJWT + ": no user NKey seed"},
		{"noCredentials", config.NATS{}, "authorization violation"},
		{"missingFile", config.NATS{CredentialsFile: filepath.Join(t.TempDir(), "gone.creds")}, "gone.creds: no such file"},
	})
}

// TestNKeyUser runs a server whose one user is an NKey.
func TestNKeyUser(t *testing.T) {
	t.Parallel()
	pub, seed := servertest.NKeyUser(t)
	_, otherSeed := servertest.NKeyUser(t)
	srv := servertest.Start(t, fmt.Sprintf("authorization {\n  users: [{nkey: %q}]\n}\n", pub))
	malformed := filepath.Join(t.TempDir(), "malformed.nk")
	s := readText(t, seed)
	writeText(t, malformed, s[:len(s)-4]+"AAAA")
	publicOnly := filepath.Join(t.TempDir(), "public.nk")
	writeText(t, publicOnly, pub)

	runSecCases(t, servertest.URL(srv, "nats"), []secCase{
		{"right", config.NATS{NKeySeedFile: seed}, ""},
		{"wrongSeed", config.NATS{NKeySeedFile: otherSeed}, "the server refused this client's user|nats.nkey_seed_file|authorization violation"},
		{"malformedSeed", config.NATS{NKeySeedFile: malformed}, "nats.nkey_seed_file " + malformed + ": the NKey seed is malformed"},
		{"publicKeyOnly", config.NATS{NKeySeedFile: publicOnly}, "nats.nkey_seed_file " + publicOnly + ":"},
		{"noSeed", config.NATS{}, "authorization violation"},
	})
}

func readText(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func writeText(t *testing.T, path, s string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(s), 0o600); err != nil {
		t.Fatal(err)
	}
}

// connectAndPublish connects to url with n's security options, for at
// most 10s, and publishes one run on n's stream.
func connectAndPublish(t *testing.T, url string, n config.NATS) error {
	t.Helper()
	opts, err := queue.SecurityOptions(n)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	nc, js, err := queue.Connect(ctx, url, "natssec-test", zap.NewNop(), opts...)
	if err != nil {
		return err
	}
	defer nc.Close()
	return publishOne(t, js, n)
}

// streamNames gives n a stream of its own, named for the case.
func streamNames(n config.NATS, name string) config.NATS {
	d := config.Default().NATS
	n.Stream, n.SubjectPrefix, n.Consumer = "SEC_"+strings.ToUpper(name), "sec_"+strings.ToLower(name), "workers"
	n.DuplicateWindow, n.Replicas = d.DuplicateWindow, d.Replicas
	return n
}

// publishOne makes n's stream, publishes a run as ingest does and checks
// the stream holds it.
func publishOne(t *testing.T, js jetstream.JetStream, n config.NATS) error {
	t.Helper()
	ctx := t.Context()
	s, err := queue.EnsureStream(ctx, js, n)
	if err != nil {
		return err
	}
	env := queue.Envelope{MessageID: 1, RunNo: 1, BatchID: "b1", SchemaID: "customer_message"}
	if _, err := queue.NewPublisher(js, n).Publish(ctx, env.DedupID(), env); err != nil {
		return err
	}
	info, err := s.Info(ctx)
	if err != nil {
		return err
	}
	if info.State.Msgs != 1 {
		t.Fatalf("stream %s holds %d messages after one publish", n.Stream, info.State.Msgs)
	}
	return nil
}

// TestSecuredNATSServer29 runs the nats-server binary of the machine
// (Debian's 2.9, the oldest the product supports) with TLS verify and
// operator mode together: the right files connect and publish; a missing
// client certificate or user is refused with an error naming the setting.
func TestSecuredNATSServer29(t *testing.T) {
	t.Parallel()
	pki := servertest.NewPKI(t, "right")
	op := servertest.NewOperator(t)
	op.Account(t, "APP", true)
	addr := servertest.StartBinary(t, pki.TLSBlock(true)+op.ConfigBlock(t))
	creds := op.UserCreds(t, "APP")
	right := config.NATSTLS{CAFile: pki.CAFile, CertFile: pki.ClientCert, KeyFile: pki.ClientKey}
	runSecCases(t, "tls://"+addr, []secCase{
		{"right", config.NATS{TLS: right, CredentialsFile: creds}, ""},
		{"noClientCert", config.NATS{TLS: config.NATSTLS{CAFile: pki.CAFile}, CredentialsFile: creds}, "client certificate|nats.tls.cert_file"},
		{"noCredentials", config.NATS{TLS: right}, "nats.credentials_file|authorization violation"},
		{"wrongCA", config.NATS{TLS: config.NATSTLS{CAFile: servertest.NewPKI(t, "other").CAFile, CertFile: pki.ClientCert, KeyFile: pki.ClientKey},
			CredentialsFile: creds}, "nats.tls.ca_file|unknown authority"},
	})
}

// TestConnectKeepsTheLastError: when ctx ends while Connect waits to try
// again, the error still says why the attempts failed, not only that the
// deadline passed.
func TestConnectKeepsTheLastError(t *testing.T) {
	t.Parallel()
	srv := servertest.Start(t, "")
	url := servertest.URL(srv, "nats")
	srv.Shutdown()
	srv.WaitForShutdown()
	ctx, cancel := context.WithTimeout(t.Context(), time.Second)
	defer cancel()
	_, _, err := queue.Connect(ctx, url, "natssec-test", zap.NewNop())
	if err == nil || !strings.Contains(err.Error(), "context deadline exceeded (last attempt: ") ||
		!strings.Contains(err.Error(), "no servers available") {
		t.Fatalf("Connect to a server gone, for 1s: %v; want the deadline and the last attempt's error", err)
	}
	if queue.IsRefused(err) {
		t.Errorf("IsRefused(%v) = true for a server that is away", err)
	}
}

package queue_test

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/extractq/extractq/config"
	"github.com/extractq/extractq/queue"
	"github.com/extractq/extractq/queue/servertest"
)

// TestSecurityOptionsFileErrors: a bad file is named, with its problem,
// before any connection is tried (no server here).
func TestSecurityOptionsFileErrors(t *testing.T) {
	t.Parallel()
	pki := servertest.NewPKI(t, "a")
	other := servertest.NewPKI(t, "b")
	dir := t.TempDir()
	notPEM := filepath.Join(dir, "not.pem")
	writeText(t, notPEM, "hello\n")
	empty := filepath.Join(dir, "empty")
	writeText(t, empty, "\n")
	_, seed := servertest.NKeyUser(t)
	missing := filepath.Join(dir, "missing.pem")

	for _, c := range []struct {
		name string
		n    config.NATS
		want string
	}{
		{"caMissing", config.NATS{TLS: config.NATSTLS{CAFile: missing}}, "nats.tls.ca_file " + missing + ": no such file"},
		{"caNotPEM", config.NATS{TLS: config.NATSTLS{CAFile: notPEM}}, "nats.tls.ca_file " + notPEM + ": not a PEM certificate"},
		{"caIsAKey", config.NATS{TLS: config.NATSTLS{CAFile: pki.ClientKey}}, "nats.tls.ca_file " + pki.ClientKey + ": not a PEM certificate"},
		{"certNotPEM", config.NATS{TLS: config.NATSTLS{CertFile: notPEM, KeyFile: pki.ClientKey}}, "nats.tls.cert_file " + notPEM + ": not a PEM certificate"},
		{"keyNotPEM", config.NATS{TLS: config.NATSTLS{CertFile: pki.ClientCert, KeyFile: notPEM}}, "nats.tls.key_file " + notPEM + ": not a PEM private key"},
		{"keyOfAnotherCert", config.NATS{TLS: config.NATSTLS{CertFile: pki.ClientCert, KeyFile: other.ClientKey}},
			"nats.tls.key_file " + other.ClientKey + ": the key does not match the certificate in nats.tls.cert_file " + pki.ClientCert},
		{"keyMissing", config.NATS{TLS: config.NATSTLS{CertFile: pki.ClientCert, KeyFile: missing}}, "nats.tls.key_file " + missing + ": no such file"},
		{"certExpired", config.NATS{TLS: config.NATSTLS{CertFile: pki.ExpiredCert, KeyFile: pki.ExpiredKey}}, "nats.tls.cert_file " + pki.ExpiredCert + ": the certificate expired at "},
		{"certWithoutKey", config.NATS{TLS: config.NATSTLS{CertFile: pki.ClientCert}}, "cert_file and key_file go together"},
		{"credsEmpty", config.NATS{CredentialsFile: empty}, "nats.credentials_file " + empty + ": the file is empty"},
		{"credsNotCreds", config.NATS{CredentialsFile: seed}, "nats.credentials_file " + seed + ": no user JWT"},
		{"seedIsACert", config.NATS{NKeySeedFile: pki.CAFile}, "nats.nkey_seed_file " + pki.CAFile + ": the NKey seed is malformed"},
		{"both", config.NATS{CredentialsFile: seed, NKeySeedFile: seed}, "credentials_file and nkey_seed_file are both set"},
	} {
		opts, err := queue.SecurityOptions(c.n)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %d options, error %v; want one naming %q", c.name, len(opts), err, c.want)
		}
	}

	if opts, err := queue.SecurityOptions(config.NATS{}); err != nil || len(opts) != 0 {
		t.Errorf("nothing configured: %d options, %v; want none", len(opts), err)
	}
}

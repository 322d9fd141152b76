package startup

import (
	"strings"
	"testing"

	"github.com/extractq/extractq/config"
)

func TestLoadConfigNATSVariables(t *testing.T) {
	t.Parallel()
	cfg, err := LoadConfig("", Env{NATSCreds: "app.creds", NATSCA: "ca.pem", NATSCert: "c.pem", NATSKey: "c.key"})
	if err != nil {
		t.Fatal(err)
	}
	want := config.NATSTLS{CAFile: "ca.pem", CertFile: "c.pem", KeyFile: "c.key"}
	if cfg.NATS.CredentialsFile != "app.creds" || cfg.NATS.NKeySeedFile != "" || cfg.NATS.TLS != want {
		t.Fatalf("nats %+v", cfg.NATS)
	}
	cfg, err = LoadConfig("", Env{NATSNKey: "u.nk"})
	if err != nil || cfg.NATS.NKeySeedFile != "u.nk" {
		t.Fatalf("NATS_NKEY: %+v, %v", cfg.NATS, err)
	}

	// The variables are checked as the file is.
	_, err = LoadConfig("", Env{NATSCreds: "app.creds", NATSNKey: "u.nk"})
	if err == nil || !strings.Contains(err.Error(), "credentials_file and nkey_seed_file are both set") {
		t.Fatalf("NATS_CREDS with NATS_NKEY: %v", err)
	}
	_, err = LoadConfig("", Env{NATSCert: "c.pem"})
	if err == nil || !strings.Contains(err.Error(), "cert_file and key_file go together") {
		t.Fatalf("NATS_CERT alone: %v", err)
	}
}

package startup

import (
	"os"
	"path/filepath"
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

func TestLoadConfigWorkerSchema(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	path := filepath.Join(dir, "config.yaml")
	if err := os.WriteFile(path, []byte("nats:\n  consumers: per_schema\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := LoadConfig(path, Env{WorkerSchema: "return_request"})
	if err != nil {
		t.Fatal(err)
	}
	if got := cfg.WorkerConsumers(); len(got) != 1 || got[0].Name != "workers-return_request" {
		t.Fatalf("WORKER_SCHEMA=return_request reads %+v", got)
	}
	// Checked as the file is: an unknown schema, or shared consumers.
	if _, err := LoadConfig(path, Env{WorkerSchema: "invoices"}); err == nil || !strings.Contains(err.Error(), `worker.schema: "invoices" is not a configured schema`) {
		t.Fatalf("WORKER_SCHEMA=invoices: %v", err)
	}
	if _, err := LoadConfig("", Env{WorkerSchema: "return_request"}); err == nil ||
		!strings.Contains(err.Error(), "worker.schema") || !strings.Contains(err.Error(), "nats.consumers is shared") {
		t.Fatalf("WORKER_SCHEMA with shared consumers: %v", err)
	}
}

// TestLoadConfigModel: an llm.model naming no model stops the start,
// naming the key, unless LLM_MODEL names one.
func TestLoadConfigModel(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "config.yaml")
	if err := os.WriteFile(path, []byte("llm:\n  model: \"\"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadConfig(path, Env{}); err == nil || !strings.HasPrefix(err.Error(), `llm.model: "" names no model, and LLM_MODEL is not set`) {
		t.Fatalf("llm.model empty: %v; want an error naming llm.model", err)
	}
	cfg, err := LoadConfig(path, Env{LLMModel: "gpt-4o-mini"})
	if err != nil || cfg.LLM.Model != "gpt-4o-mini" {
		t.Fatalf("llm.model empty, LLM_MODEL gpt-4o-mini: %q, %v", cfg.LLM.Model, err)
	}
}

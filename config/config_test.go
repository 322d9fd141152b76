package config

import (
	"strings"
	"testing"
	"time"
)

func TestParse(t *testing.T) {
	t.Parallel()

	t.Run("DefaultsAreValid", func(t *testing.T) {
		t.Parallel()
		c := Default()
		if c.DefaultSchema().ID != "customer_message" || c.Worker.AckWait != 60*time.Second {
			t.Fatalf("%+v", c)
		}
		if _, ok := c.Prices.Models[c.LLM.Model]; !ok {
			t.Fatalf("default model %q has no price", c.LLM.Model)
		}
	})

	t.Run("OverlayKeepsDefaults", func(t *testing.T) {
		t.Parallel()
		c, err := Parse([]byte("nats:\n  stream: OTHER\nprices:\n  models:\n    my-model: {input_per_mtok: 1, output_per_mtok: 2}\n"))
		if err != nil {
			t.Fatal(err)
		}
		if c.NATS.Stream != "OTHER" || c.NATS.SubjectPrefix != "extractq" {
			t.Fatalf("nats %+v", c.NATS)
		}
		if _, ok := c.Prices.Models["extractq-sim-1"]; !ok {
			t.Fatal("default prices lost")
		}
		if c.Prices.Models["my-model"].OutputPerMTok != 2 {
			t.Fatal("new price missing")
		}
		if c.Simulator.RepairFixRate != 0.75 || c.Simulator.Profile != "generic" {
			t.Fatalf("simulator %+v", c.Simulator)
		}
	})

	t.Run("Provider", func(t *testing.T) {
		t.Parallel()
		if p := Default().LLM.Provider; p != "generic" {
			t.Fatalf("default provider %q, want generic", p)
		}
		for _, name := range Providers {
			c, err := Parse([]byte("llm:\n  provider: " + name + "\n"))
			if err != nil || c.LLM.Provider != name {
				t.Fatalf("provider %s: %v", name, err)
			}
		}
	})

	t.Run("NATSSecurityAndReplicas", func(t *testing.T) {
		t.Parallel()
		if r := Default().NATS.Replicas; r != 1 {
			t.Fatalf("default nats.replicas %d, want 1", r)
		}
		c, err := Parse([]byte("nats:\n  replicas: 3\n  credentials_file: app.creds\n  tls:\n    ca_file: ca.pem\n    cert_file: c.pem\n    key_file: c.key\n"))
		if err != nil {
			t.Fatal(err)
		}
		want := NATSTLS{CAFile: "ca.pem", CertFile: "c.pem", KeyFile: "c.key"}
		if c.NATS.Replicas != 3 || c.NATS.CredentialsFile != "app.creds" || c.NATS.TLS != want {
			t.Fatalf("nats %+v", c.NATS)
		}
	})

	t.Run("ErrorsNameTheField", func(t *testing.T) {
		t.Parallel()
		for doc, want := range map[string]string{
			"llm:\n  request_mode: grpc\n":                                 "llm.request_mode",
			"schemas:\n  - {id: a, file: a.json, repair: twice}\n":         "schemas[0].repair",
			"schemas:\n  - {id: a, file: a.json, rendering: tiny}\n":       "schemas[0].rendering",
			"worker:\n  concurrency: -1\n":                                 "worker.concurrency",
			"simulator:\n  fenced_rate: 2\n":                               "simulator.fenced_rate",
			"simulator:\n  profile: bedrock\n":                             "simulator.profile",
			"simulator:\n  refusal_rate: 1.5\n":                            "simulator.refusal_rate",
			"nats:\n  strem: X\n":                                          `unknown key "strem" in nats`,
			"ingest:\n  max_text_bytes: -5\n":                              "ingest.max_text_bytes",
			"nats:\n  duplicate_window: -1s\n":                             "nats.duplicate_window",
			"budget:\n  max_cost_usd: -3\n":                                "budget.max_cost_usd",
			"llm:\n  provider: azure\n":                                    `llm.provider: "azure" is not one of openai, vllm, ollama, llamacpp, generic`,
			"llm:\n  provider: OpenAI\n":                                   "llm.provider",
			"nats:\n  replicas: 7\n":                                       "nats.replicas: 7 is not between 1 and 5",
			"nats:\n  tls:\n    cert_file: c.pem\n":                        "nats.tls: cert_file and key_file go together",
			"nats:\n  tls:\n    ca_flie: ca.pem\n":                         `unknown key "ca_flie" in nats.tls`,
			"nats:\n  credentials_file: a.creds\n  nkey_seed_file: u.nk\n": "credentials_file and nkey_seed_file are both set",
		} {
			_, err := Parse([]byte(doc))
			if err == nil || !strings.Contains(err.Error(), want) {
				t.Errorf("%q: error %v, want one naming %s", doc, err, want)
			}
		}
	})
}

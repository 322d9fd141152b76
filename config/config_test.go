package config

import (
	"reflect"
	"slices"
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

	t.Run("Consumers", func(t *testing.T) {
		t.Parallel()
		c := Default()
		if c.NATS.Consumers != ConsumersShared {
			t.Fatalf("default nats.consumers %q, want shared", c.NATS.Consumers)
		}
		shared := []ConsumerSpec{{Name: "workers", Filter: "extractq.runs.>"}}
		if got := c.Consumers(); !slices.Equal(got, shared) || !slices.Equal(c.WorkerConsumers(), shared) {
			t.Fatalf("shared consumers %+v", got)
		}
		if got := c.NATS.ConsumerOf("return_request"); got != shared[0] {
			t.Fatalf("shared ConsumerOf %+v", got)
		}
		c, err := Parse([]byte("nats:\n  consumers: per_schema\n"))
		if err != nil {
			t.Fatal(err)
		}
		all := []ConsumerSpec{
			{Name: "workers-customer_message", Filter: "extractq.runs.customer_message", SchemaID: "customer_message"},
			{Name: "workers-return_request", Filter: "extractq.runs.return_request", SchemaID: "return_request"},
		}
		if got := c.Consumers(); !slices.Equal(got, all) || !slices.Equal(c.WorkerConsumers(), all) {
			t.Fatalf("per_schema consumers %+v, worker's %+v", got, c.WorkerConsumers())
		}
		c, err = Parse([]byte("nats:\n  consumers: per_schema\nworker:\n  schema: return_request\n"))
		if err != nil {
			t.Fatal(err)
		}
		if got := c.WorkerConsumers(); !slices.Equal(got, all[1:]) || !slices.Equal(c.Consumers(), all) {
			t.Fatalf("worker.schema return_request reads %+v", got)
		}
		if got := c.NATS.ConsumerOf("return_request"); got != all[1] {
			t.Fatalf("per_schema ConsumerOf %+v", got)
		}
	})

	t.Run("ErrorsNameTheField", func(t *testing.T) {
		t.Parallel()
		for doc, want := range map[string]string{
			"llm:\n  request_mode: grpc\n":                                            "llm.request_mode",
			"schemas:\n  - {id: a, file: a.json, repair: twice}\n":                    "schemas[0].repair",
			"worker:\n  concurrency: -1\n":                                            "worker.concurrency",
			"simulator:\n  fenced_rate: 2\n":                                          "simulator.fenced_rate",
			"simulator:\n  profile: bedrock\n":                                        "simulator.profile",
			"simulator:\n  refusal_rate: 1.5\n":                                       "simulator.refusal_rate",
			"nats:\n  strem: X\n":                                                     `unknown key "strem" in nats`,
			"ingest:\n  max_text_bytes: -5\n":                                         "ingest.max_text_bytes",
			"nats:\n  duplicate_window: -1s\n":                                        "nats.duplicate_window",
			"budget:\n  max_cost_usd: -3\n":                                           "budget.max_cost_usd",
			"llm:\n  provider: azure\n":                                               `llm.provider: "azure" is not one of openai, vllm, ollama, llamacpp, generic`,
			"llm:\n  provider: OpenAI\n":                                              "llm.provider",
			"nats:\n  replicas: 7\n":                                                  "nats.replicas: 7 is not between 1 and 5",
			"nats:\n  tls:\n    cert_file: c.pem\n":                                   "nats.tls: cert_file and key_file go together",
			"nats:\n  tls:\n    ca_flie: ca.pem\n":                                    `unknown key "ca_flie" in nats.tls`,
			"nats:\n  credentials_file: a.creds\n  nkey_seed_file: u.nk\n":            "credentials_file and nkey_seed_file are both set",
			"nats:\n  consumers: per_pool\n":                                          `nats.consumers: "per_pool" is not shared or per_schema`,
			"worker:\n  schema: customer_message\n":                                   `worker.schema: "customer_message" is set but nats.consumers is shared`,
			"nats:\n  consumers: per_schema\nworker:\n  schema: invoices\n":           `worker.schema: "invoices" is not a configured schema (schemas: customer_message, return_request)`,
			"nats:\n  consumers: per_schema\nschemas:\n  - {id: a.b, file: a.json}\n": `schemas[0].id: "a.b" cannot name a consumer`,
			"schemas:\n  - {id: a, file: a.json, rendering: tiny}\n":                  "schemas[0].rendering",
			// Names JetStream refuses stop the start, naming the key,
			// rather than a worker retrying to make the stream for ever.
			"nats:\n  stream: \"bad name.x\"\n":     `nats.stream: "bad name.x" cannot name a JetStream stream or consumer (' ' at byte 3)`,
			"nats:\n  stream: \"\"\n":               "nats.stream: empty",
			"nats:\n  consumer: a.b\n":              `nats.consumer: "a.b" cannot name a JetStream stream or consumer ('.' at byte 1)`,
			"results:\n  stream: X/Y\n":             `results.stream: "X/Y" cannot name`,
			"nats:\n  subject_prefix: \"t1 y.*\"\n": `nats.subject_prefix: "t1 y.*" is not a NATS subject prefix (' ' at byte 2)`,
			"nats:\n  subject_prefix: acme.\n":      `nats.subject_prefix: "acme." has an empty token`,
			"nats:\n  subject_prefix: \"\"\n":       "nats.subject_prefix: empty",
			// Each provider and stream limit is named by its own key.
			"provider:\n  multiplier: 0.5\n":       "provider.multiplier: 0.5 is below 1",
			"provider:\n  max_retries: -1\n":       "provider.max_retries: -1 is negative",
			"provider:\n  tokens_per_minute: -2\n": "provider.tokens_per_minute: -2 is negative",
			"nats:\n  max_bytes: -1\n":             "nats.max_bytes: -1 is negative",
			// A million ack waits in the consumer's BackOff passed NATS's
			// max_payload (the worker retried for ever); 10^12 ran it out
			// of memory.
			"worker:\n  max_deliver: 1000000000000\n": "worker.max_deliver: 1000000000000 is above 100",
			"worker:\n  max_deliver: 101\n":           "worker.max_deliver: 101 is above 100",
			// No schema at all left ingest's default schema to panic
			// (index out of range) rather than refuse the file.
			"schemas: []\n": "schemas: empty",
			// A schema id ends the runs' subject in either consumer
			// mode: a wildcard or a space published runs to the
			// subject "<prefix>.runs.>", which no schema's filter reads.
			"schemas:\n  - {id: \">\", file: a.json}\n":    `schemas[0].id: ">" cannot end a NATS subject`,
			"schemas:\n  - {id: \"a b\", file: a.json}\n":  `schemas[0].id: "a b" cannot end a NATS subject (<prefix>.runs.<schema id>): ' ' at byte 1`,
			"schemas:\n  - {id: \"a.*\", file: a.json}\n":  `schemas[0].id: "a.*" cannot end a NATS subject`,
			"schemas:\n  - {id: \"a..b\", file: a.json}\n": `schemas[0].id: "a..b" cannot end a NATS subject (<prefix>.runs.<schema id>): an empty token`,
			// NaN passed every "< 0" and "> 1" check: a NaN budget never
			// stopped a run, a NaN price made every cost NaN, and an
			// infinite price failed every commit (numeric(14,8)).
			"budget:\n  max_cost_usd: .nan\n":                                          "budget.max_cost_usd: NaN is not a positive number",
			"budget:\n  max_cost_usd: .inf\n":                                          "budget.max_cost_usd: +Inf is not a positive number",
			"prices:\n  models:\n    m: {input_per_mtok: .nan}\n":                      "prices.models.m: NaN",
			"prices:\n  models:\n    m: {output_per_mtok: .inf}\n":                     "prices.models.m: +Inf",
			"prices:\n  models:\n    m: {cached_input_per_mtok: -.inf}\n":              "prices.models.m: -Inf",
			"provider:\n  multiplier: .nan\n":                                          "provider.multiplier: NaN is below 1",
			"simulator:\n  repair_fix_rate: .nan\n":                                    "simulator.repair_fix_rate: NaN is not in [0, 1]",
			"simulator:\n  prompt_errors:\n    - {match: x, value_error_rate: .nan}\n": "simulator.prompt_errors[0].value_error_rate: NaN",
		} {
			_, err := Parse([]byte(doc))
			if err == nil || !strings.Contains(err.Error(), want) {
				t.Errorf("%q: error %v, want one naming %s", doc, err, want)
			}
		}
	})
}

// TestParseTakesKeysAsWritten: a key the file names is never replaced by
// its default; a 0 that means nothing is an error naming the key.
func TestParseTakesKeysAsWritten(t *testing.T) {
	t.Parallel()
	c, err := Parse([]byte("provider: {max_retries: 0}\n"))
	if err != nil || c.Provider.MaxRetries != 0 {
		t.Fatalf("max_retries: 0 gave %v, %v; want 0 (no retries)", c.Provider.MaxRetries, err)
	}
	if d := Default().Provider.MaxRetries; d != 4 {
		t.Fatalf("default max_retries %d, want 4", d)
	}
	for _, tc := range []struct{ yaml, want string }{
		{"llm: {timeout: 0s}", "llm.timeout: 0s is not a positive duration"},
		{"worker: {commit_batch: 0}", "worker.commit_batch: 0 is below 1"},
		{"worker: {max_deliver: 0}", "worker.max_deliver: 0 is below 2"},
		{"relay: {sweep_every: 0s}", "relay.sweep_every: 0s is no interval"},
		{"results: {publish_every: 0s}", "results.publish_every: 0s is not a positive duration"},
		{"llm: {context_window_tokens: 0}", "llm.context_window_tokens: 0 is below 1"},
		{"provider: {breaker_failures: 0}", "provider.breaker_failures: 0 is below 1"},
		{"worker: {in_progress_every: 5m, ack_wait: 10s}", "worker.in_progress_every: 5m0s is not below worker.ack_wait (10s)"},
		{"worker: {ack_wait: abc}", `worker.ack_wait: "abc" is not a duration`},
		{"worker:\n  concurrency: [1]\n", "worker.concurrency: a list is not an integer (line 2)"},
		{"worker: 5", `worker: "5" is not a mapping (key: value lines) (line 1)`},
		{"schemas: {id: a}", "schemas: a mapping is not a list (line 1)"},
		{"ingest: {webhooks: [{name: a, signature: {tolerance: 5 minutes}}]}", `ingest.webhooks[0].signature.tolerance: "5 minutes" is not a duration`},
	} {
		if _, err := Parse([]byte(tc.yaml)); err == nil || !strings.HasPrefix(err.Error(), tc.want) {
			t.Errorf("%s: error %v, want it to start %q", tc.yaml, err, tc.want)
		}
	}
	// in_progress_every, left out, follows the file's ack_wait.
	c, err = Parse([]byte("worker: {ack_wait: 9s}\n"))
	if err != nil || c.Worker.InProgressEvery != 3*time.Second {
		t.Fatalf("ack_wait: 9s gave in_progress_every %v, %v; want 3s", c.Worker.InProgressEvery, err)
	}
	c, err = Parse([]byte("relay: {sweep_every: -1s}\n"))
	if err != nil || c.Relay.SweepEvery != -time.Second {
		t.Fatalf("sweep_every: -1s (off) gave %v, %v", c.Relay.SweepEvery, err)
	}
}

// TestDefaultYAMLIsTheDefaults: default.yaml parses to the empty file's
// Config, and names every default WithDefaults knows of.
func TestDefaultYAMLIsTheDefaults(t *testing.T) {
	t.Parallel()
	c, err := Parse(DefaultYAML)
	if err != nil {
		t.Fatal(err)
	}
	empty := Default()
	if !reflect.DeepEqual(c, empty) {
		t.Fatalf("default.yaml parses to\n%+v\nthe empty file to\n%+v", c, empty)
	}
	if filled := empty.WithDefaults(); !reflect.DeepEqual(filled, *empty) {
		t.Fatalf("WithDefaults changes the defaults:\n%+v\nfrom\n%+v", filled, *empty)
	}
}

// Package config holds the product's one configuration file: schemas and
// their repair strategy, prompts, budgets, the price table, concurrency,
// stream and subject names, and the LLM simulator's fault rates.
//
// Connections (DATABASE_URL, NATS_URL, LLM_BASE_URL, LLM_API_KEY,
// LLM_MODEL) are not here: commands read them from the environment. The
// file is YAML; every field has a default, so an empty file is valid. See
// config/default.yaml for the documented defaults.
package config

import (
	"cmp"
	_ "embed"
	"errors"
	"fmt"
	"math"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"gopkg.in/yaml.v3"
)

// DefaultYAML is the documented default configuration, embedded.
//
//go:embed default.yaml
var DefaultYAML []byte

// Config is the whole configuration file.
type Config struct {
	LLM       LLM       `yaml:"llm"`
	Provider  Provider  `yaml:"provider"`
	Schemas   []Schema  `yaml:"schemas"`
	Budget    Budget    `yaml:"budget"`
	Prices    Prices    `yaml:"prices"`
	Worker    Worker    `yaml:"worker"`
	NATS      NATS      `yaml:"nats"`
	Relay     Relay     `yaml:"relay"`
	Results   Results   `yaml:"results"`
	Ingest    Ingest    `yaml:"ingest"`
	Postgres  Postgres  `yaml:"postgres"`
	Simulator Simulator `yaml:"simulator"`
}

// LLM configures the calls to the OpenAI-compatible endpoint.
type LLM struct {
	// Model is the model name sent with each call. LLM_MODEL overrides it.
	// Default "extractq-sim-1", the simulator's model.
	Model string `yaml:"model"`
	// RequestMode is how the schema is asked for: "response_format" (JSON
	// schema structured output) or "tools" (one forced tool call). Default
	// "response_format".
	RequestMode string `yaml:"request_mode"`
	// MaxCompletionTokens caps each reply, in tokens. Default 1024.
	MaxCompletionTokens int `yaml:"max_completion_tokens"`
	// ContextWindowTokens is the model's context size in tokens; a request
	// estimated above it is not sent. Default 32768.
	ContextWindowTokens int `yaml:"context_window_tokens"`
	// Timeout bounds one call. Default 60s.
	Timeout time.Duration `yaml:"timeout"`
	// Provider names the server behind LLM_BASE_URL, which decides what
	// each request carries: the token-limit field, strict mode, the
	// tool_choice form (see pipeline.ProviderFeatures and
	// docs/providers.md). One of Providers. Default "generic": what any
	// OpenAI-compatible server is sent (max_completion_tokens, no strict
	// mode, a named tool_choice).
	Provider string `yaml:"provider"`
}

// Providers are the values of llm.provider.
var Providers = []string{"openai", "vllm", "ollama", "llamacpp", "generic"}

// Provider configures the resilience layer below the extraction contract:
// retries of transport failures, the client-side rate limits and the
// circuit breaker. Retry knobs are named as watermill's middleware.Retry
// names them.
type Provider struct {
	// MaxRetries is how many times one call is retried after a timeout, a
	// connection error, 429 or 5xx. Default 4.
	MaxRetries int `yaml:"max_retries"`
	// InitialInterval is the first backoff. Default 500ms.
	InitialInterval time.Duration `yaml:"initial_interval"`
	// MaxInterval caps one backoff (Retry-After may ask for longer, up to
	// MaxElapsedTime). Default 30s.
	MaxInterval time.Duration `yaml:"max_interval"`
	// Multiplier grows the backoff after each retry. Default 2.
	Multiplier float64 `yaml:"multiplier"`
	// MaxElapsedTime bounds one call with all its retries. Default 2m.
	MaxElapsedTime time.Duration `yaml:"max_elapsed_time"`
	// RequestsPerMinute is the provider's request limit for the whole
	// deployment, shared by the worker replicas as Share says (with
	// share none, this process's own); 0 means no client-side limit.
	// Default 0.
	RequestsPerMinute int `yaml:"requests_per_minute"`
	// TokensPerMinute is the provider's token limit (prompt estimate plus
	// completion cap), shared the same way; 0 means none. Default 0.
	TokensPerMinute int `yaml:"tokens_per_minute"`
	// BreakerFailures is how many consecutive calls whose retries were spent
	// open the circuit breaker, which stops fetching new messages. Default 5.
	BreakerFailures int `yaml:"breaker_failures"`
	// BreakerCooldown is how long the breaker stays open before one probe
	// call. Default 30s.
	BreakerCooldown time.Duration `yaml:"breaker_cooldown"`
	// Share says how worker replicas share RequestsPerMinute and
	// TokensPerMinute, which are then the whole deployment's limits:
	// "replicas" (the default) gives each live replica 1/n, counted in
	// a NATS key-value bucket (queue.LimitShare), and carries one
	// replica's breaker opening to the others; "none" gives each process
	// the whole limits.
	Share string `yaml:"share"`
	// MaxReplicas is the most worker replicas that may run at once (the
	// KEDA ScaledObject's maxReplicaCount): while the replicas cannot be
	// counted, each takes 1/MaxReplicas. Default 1.
	MaxReplicas int `yaml:"max_replicas"`
	// ShareHeartbeat is how often a replica renews its entry and counts
	// the others; a replica gone drops out within three. Default 2s.
	ShareHeartbeat time.Duration `yaml:"share_heartbeat"`
}

// Share modes of Provider.Share.
const (
	ShareReplicas = "replicas"
	ShareNone     = "none"
)

// Schema names one JSON Schema in use.
type Schema struct {
	// ID is the schema's short name, used on subjects and in tables.
	ID string `yaml:"id"`
	// File is the schema file: a name inside the embedded schemas/ folder,
	// or a path on disk.
	File string `yaml:"file"`
	// Repair is the repair strategy: "regenerate" or "patch". Default
	// "regenerate".
	Repair string `yaml:"repair"`
	// Prompt is the prompt template version: an embedded one (pipeline/
	// prompts, such as "extract.v1"), or the path of a template file
	// ending in ".tmpl", versioned by its content hash
	// (pipeline.OpenPrompt) and read at start. Default "extract.v1".
	Prompt string `yaml:"prompt"`
	// Rendering is how the schema is written into each request: "full"
	// (every description, the default) or "compact" (the root
	// description left out, the others cut to their first clause; the
	// prompt version recorded gains "+schema.compact.v1"). See
	// docs/extraction.md, "Schema renderings".
	Rendering string `yaml:"rendering"`
	// QA sends a share of the schema's validated results to the QA queue
	// of cmd/triage (docs/triage.md, "The QA queue"). Nil, the default,
	// samples none.
	QA *QA `yaml:"qa"`
}

// QA configures the QA sampling of one schema's validated results
// (succeeded and repaired runs). Each run is drawn or not when its
// outcome commits, by a deterministic draw in [0, 1) from a hash of the
// seed, the message id and the run number: the same run always gets the
// same answer, whichever worker commits it.
type QA struct {
	// Share is the probability, in [0, 1], that a run is drawn, for runs
	// of a stratum Strata does not name. Required.
	Share float64 `yaml:"share"`
	// StratifyBy is a JSON Pointer (RFC 6901) into the record, such as
	// "/intent": its value is the run's stratum. Default none (one
	// stratum).
	StratifyBy string `yaml:"stratify_by"`
	// Strata overrides Share for the strata it names (the value at
	// StratifyBy as text; "" for a null or absent value), to sample rare
	// or risky strata more. Reports weight each sample by the inverse of
	// its share. Default none.
	Strata map[string]float64 `yaml:"strata"`
	// Seed changes which runs are drawn. Default "".
	Seed string `yaml:"seed"`
}

// Budget bounds what one message may cost, over all its calls.
type Budget struct {
	// MaxTokens is the most prompt plus completion tokens per message run.
	// Default 16000.
	MaxTokens int `yaml:"max_tokens"`
	// MaxCostUSD is the most cost per message run, in US dollars. Default 0.05.
	MaxCostUSD float64 `yaml:"max_cost_usd"`
}

// Prices is the price table, versioned so each call records which prices
// made its cost.
type Prices struct {
	Version string           `yaml:"version"`
	Models  map[string]Price `yaml:"models"`
}

// Price is one model's price, in US dollars per million tokens.
type Price struct {
	InputPerMTok       float64 `yaml:"input_per_mtok"`
	CachedInputPerMTok float64 `yaml:"cached_input_per_mtok"`
	OutputPerMTok      float64 `yaml:"output_per_mtok"`
}

// Worker configures cmd/worker.
type Worker struct {
	// Concurrency is how many messages one worker process handles at once.
	// Default 8.
	Concurrency int `yaml:"concurrency"`
	// AckWait is JetStream's ack wait for the consumer. Default 60s.
	AckWait time.Duration `yaml:"ack_wait"`
	// MaxDeliver is JetStream's delivery limit per message, 2 to
	// MaxMaxDeliver. Default 5.
	MaxDeliver int `yaml:"max_deliver"`
	// InProgressEvery is how often a slow message's ack wait is renewed;
	// below AckWait. Default a third of AckWait (the file's, when it
	// names ack_wait only).
	InProgressEvery time.Duration `yaml:"in_progress_every"`
	// CommitBatch is the most run steps (a run's read and lease, or its
	// outcome) done in one shared Postgres transaction (each run still
	// acked only after its commit); 1 does each on its own. Default 64.
	CommitBatch int `yaml:"commit_batch"`
	// CommitWait is the most a step waits for others to share its
	// transaction; it waits at most 5% of the median provider call
	// latency, and not at all when steps come too rarely to share.
	// Default 40ms.
	CommitWait time.Duration `yaml:"commit_wait"`
	// ShutdownGrace is how long runs in flight may finish after SIGTERM
	// before they are cancelled (and redelivered later). Default 30s.
	ShutdownGrace time.Duration `yaml:"shutdown_grace"`
	// Schema, with nats.consumers per_schema, makes the worker process
	// serve only this schema's consumer (a pool of its own, see
	// NATS.Consumers); it must be a configured schema id. Empty: every
	// schema's consumer. Not with nats.consumers shared. WORKER_SCHEMA and
	// cmd/worker's -schema flag override it. Default empty.
	Schema string `yaml:"schema"`
	// GCPercent is the garbage collector's GOGC for the worker process,
	// and MemoryLimitMB its soft memory limit (GOMEMLIMIT) in MiB (0
	// takes the default, -1 for none); the environment's GOGC and
	// GOMEMLIMIT win over both. Defaults
	// DefaultGCPercent and DefaultMemoryLimitMB, chosen by measurement
	// (docs/benchmarks.md, "Garbage collection").
	GCPercent     int `yaml:"gc_percent"`
	MemoryLimitMB int `yaml:"memory_limit_mb"`
}

// Defaults of Worker.GCPercent and Worker.MemoryLimitMB, from scenario B
// (simulator, log-normal 800 ms calls) against Go's own (100, none): at
// 256 in flight 5% less worker CPU per message for 12 MB more RSS (75 →
// 87 MB); at 2,048 the peak RSS 197 MB instead of 230 at the same CPU.
// The limit is soft: near it the collector runs more often. On
// Kubernetes GOMEMLIMIT comes from the container's memory limit.
const (
	DefaultGCPercent     = 200
	DefaultMemoryLimitMB = 180
)

// NATS names the stream, subjects and consumer, so tests, the demo and
// benchmarks never collide.
type NATS struct {
	// Stream is the JetStream stream name. Default "EXTRACTQ".
	Stream string `yaml:"stream"`
	// SubjectPrefix prefixes every subject: runs are published on
	// "<prefix>.runs.<schema id>". Default "extractq".
	SubjectPrefix string `yaml:"subject_prefix"`
	// Consumer is the durable pull consumer's name, or its prefix with
	// Consumers per_schema. Default "workers".
	Consumer string `yaml:"consumer"`
	// Consumers says how the workers read the stream: ConsumersShared (one
	// durable consumer, Consumer, filtered to RunsWildcard(), read by
	// every worker) or ConsumersPerSchema (one durable consumer per
	// configured schema, "<consumer>-<schema id>", filtered to
	// RunsSubject(schema id): a pool of workers per schema, each scaled
	// on its own consumer's backlog; see Config.Consumers). A work-queue
	// stream refuses consumers whose filters overlap, so the two modes'
	// consumers never live side by side: the worker deletes the other
	// mode's consumers as it starts, once no run is in flight on them
	// (queue.EnsureConsumers). Default ConsumersShared.
	Consumers string `yaml:"consumers"`
	// DuplicateWindow is the stream's dedup window. Default 2m.
	DuplicateWindow time.Duration `yaml:"duplicate_window"`
	// MaxMsgs and MaxBytes bound the stream; 0 means unbounded. When the
	// stream is full, new publishes are refused (discard new) and ingest
	// waits and retries, so nothing is dropped.
	MaxMsgs  int64 `yaml:"max_msgs"`
	MaxBytes int64 `yaml:"max_bytes"`
	// RetryTime is how long ingest (both modes) waits out a NATS that
	// does not take a run: unreachable at start, restarting, out of
	// storage, or a stream that stays full with no worker draining it;
	// each line waits this long before the ingest stops, saying what NATS
	// answered. Default 2m, as ingest waits for Postgres.
	RetryTime time.Duration `yaml:"retry_time"`
	// Replicas is how many servers of a JetStream cluster keep a copy of
	// the stream: 1 for one server, 3 (or 5) for a cluster, at most 5
	// (JetStream's limit). An existing stream is updated to it, which a
	// cluster does in place. Default 1.
	Replicas int `yaml:"replicas"`
	// CredentialsFile is a NATS credentials file (.creds: a user JWT and
	// its NKey seed, as nsc writes it), for a server in operator (JWT)
	// mode. NATS_CREDS overrides it. Default none.
	CredentialsFile string `yaml:"credentials_file"`
	// NKeySeedFile is a file holding a user NKey seed ("SU..."), for a
	// server whose users are NKeys. Not with CredentialsFile. NATS_NKEY
	// overrides it. Default none.
	NKeySeedFile string `yaml:"nkey_seed_file"`
	// TLS names the CA and the client certificate of TLS connections.
	TLS NATSTLS `yaml:"tls"`
}

// NATSTLS is the TLS material of the NATS connection. Setting any file
// turns TLS on, as a tls:// URL does. Relative paths are relative to the
// working directory.
type NATSTLS struct {
	// CAFile is a PEM file of the CA certificates that sign the server's
	// certificate, instead of the system's roots. NATS_CA overrides it.
	CAFile string `yaml:"ca_file"`
	// CertFile and KeyFile are the client's PEM certificate and private
	// key, for a server that verifies clients (verify: true). Both or
	// neither. NATS_CERT and NATS_KEY override them.
	CertFile string `yaml:"cert_file"`
	KeyFile  string `yaml:"key_file"`
}

// RunsSubject returns the subject runs of schemaID are published on.
func (n NATS) RunsSubject(schemaID string) string {
	return n.SubjectPrefix + ".runs." + schemaID
}

// RunsWildcard returns the subject filter of every run.
func (n NATS) RunsWildcard() string { return n.SubjectPrefix + ".runs.>" }

// The values of nats.consumers.
const (
	ConsumersShared    = "shared"
	ConsumersPerSchema = "per_schema"
)

// ConsumerSpec is one durable consumer of the runs stream: its name,
// its filter subject and the schema it serves ("" for the shared one,
// which serves all).
type ConsumerSpec struct {
	Name     string
	Filter   string
	SchemaID string
}

// SharedConsumer returns the consumer of nats.consumers shared:
// nats.consumer, filtered to every run.
func (n NATS) SharedConsumer() ConsumerSpec {
	return ConsumerSpec{Name: n.Consumer, Filter: n.RunsWildcard()}
}

// SchemaConsumer returns the consumer of schemaID's runs with
// nats.consumers per_schema: "<consumer>-<schema id>", filtered to
// RunsSubject(schemaID).
func (n NATS) SchemaConsumer(schemaID string) ConsumerSpec {
	return ConsumerSpec{Name: n.Consumer + "-" + schemaID, Filter: n.RunsSubject(schemaID), SchemaID: schemaID}
}

// Consumers returns every consumer of the workers in nats.consumers' mode:
// the shared one, or one per configured schema, in the order of schemas.
func (c Config) Consumers() []ConsumerSpec {
	if c.NATS.Consumers != ConsumersPerSchema {
		return []ConsumerSpec{c.NATS.SharedConsumer()}
	}
	specs := make([]ConsumerSpec, len(c.Schemas))
	for i, s := range c.Schemas {
		specs[i] = c.NATS.SchemaConsumer(s.ID)
	}
	return specs
}

// WorkerConsumers returns the consumers this worker process reads: all of
// Consumers, or, with worker.schema set, that schema's one.
func (c Config) WorkerConsumers() []ConsumerSpec {
	if c.Worker.Schema != "" && c.NATS.Consumers == ConsumersPerSchema {
		return []ConsumerSpec{c.NATS.SchemaConsumer(c.Worker.Schema)}
	}
	return c.Consumers()
}

// ConsumerOf returns the consumer that serves schemaID's runs in
// nats.consumers' mode.
func (n NATS) ConsumerOf(schemaID string) ConsumerSpec {
	if n.Consumers == ConsumersPerSchema {
		return n.SchemaConsumer(schemaID)
	}
	return n.SharedConsumer()
}

// TriageSubject returns the core NATS subject on which event ("new") of
// a triage item of schemaID is announced:
// "<prefix>.triage.<event>.<schema id>". It is outside the stream's
// subjects, so announcements are never stored as runs.
func (n NATS) TriageSubject(event, schemaID string) string {
	return n.SubjectPrefix + ".triage." + event + "." + schemaID
}

// TriageWildcard returns the subject filter of every triage announcement.
func (n NATS) TriageWildcard() string { return n.SubjectPrefix + ".triage.>" }

// Relay configures the relay's loops that cmd/worker runs beside its
// consumer (package relay; docs/operations.md, "The relay"). A negative
// interval turns its loop off.
type Relay struct {
	// SweepEvery is how often runs recorded but never published (an
	// ingest killed between its write and its publish) are published.
	// Default 30s.
	SweepEvery time.Duration `yaml:"sweep_every"`
	// SweepAge is how old such a run must be to be swept. Default 1m.
	SweepAge time.Duration `yaml:"sweep_age"`
	// ReconcileEvery is how often the reconciler looks for queued runs
	// the stream no longer holds. Default 1m.
	ReconcileEvery time.Duration `yaml:"reconcile_every"`
	// ReconcileGrace is how long a queued run's copy may go unchecked
	// before the reconciler looks for it on the stream, and so the least
	// time before a lost run is published again. Default 5m.
	ReconcileGrace time.Duration `yaml:"reconcile_grace"`
}

// Ingest configures cmd/ingest.
type Ingest struct {
	// MaxTextBytes rejects a message whose text is longer, in bytes.
	// Default 32768.
	MaxTextBytes int `yaml:"max_text_bytes"`
	// MaxErrors is how many rejected lines an ingest lists with their
	// reasons (on stderr as they come, and in its report); the rest are
	// only counted, so a file of bad lines takes bounded memory. Default
	// 1000.
	MaxErrors int `yaml:"max_errors"`
	// Webhooks are the webhooks `ingest serve` takes at POST
	// /v1/webhooks/{name} (webhook.go; docs/input.md, "Webhooks").
	// Default none.
	Webhooks []Webhook `yaml:"webhooks"`
}

// SimPromptErrors is one entry of Simulator.PromptErrors.
type SimPromptErrors struct {
	// Match is a phrase of one prompt version's system turn.
	Match string `yaml:"match"`
	// ValueErrorRate is the chance that each non-null value of a reply is
	// wrong in a way validation cannot catch: null where the schema
	// allows it, else another value of its enum. Drawn per message and
	// path, so it is the same on every run.
	ValueErrorRate float64 `yaml:"value_error_rate"`
}

// Simulator configures devtools/cmd/llmsim, the LLM simulator. Rates are
// probabilities in [0, 1] per first reply.
type Simulator struct {
	// Profile is the server the simulator behaves as: generic (the
	// simulator's own behaviour, the default), openai, vllm, ollama or
	// llamacpp. Each reproduces that server's documented request
	// handling and reply shapes (devtools/llmsim: Profiles).
	Profile string `yaml:"profile"`
	Seed    int64  `yaml:"seed"`
	// Addr is the simulator's listen address. Default "127.0.0.1:8089".
	Addr string `yaml:"addr"`
	// InvalidJSONRate: a reply that is not JSON.
	InvalidJSONRate float64 `yaml:"invalid_json_rate"`
	// FencedRate: valid JSON inside a ``` code fence (parsed, not a fault).
	FencedRate float64 `yaml:"fenced_rate"`
	// ProseRate: valid JSON inside prose (parsed, not a fault).
	ProseRate float64 `yaml:"prose_rate"`
	// WrongTypeRate: one field with a wrong JSON type.
	WrongTypeRate float64 `yaml:"wrong_type_rate"`
	// MissingRequiredRate: one required field left out.
	MissingRequiredRate float64 `yaml:"missing_required_rate"`
	// WrongEnumRate: one field given a value outside its enum (a near
	// miss: "Refund status" for refund_status).
	WrongEnumRate float64 `yaml:"wrong_enum_rate"`
	// UngroundedRate: an id that is not in the message.
	UngroundedRate float64 `yaml:"ungrounded_rate"`
	// TruncatedRate: a reply cut off with finish_reason length.
	TruncatedRate float64 `yaml:"truncated_rate"`
	// PromptErrors ties value errors to the prompt wording (the simulator
	// cannot see the product's prompt version: the wire carries none, so
	// it recognises a version by a phrase of its system turn). The first
	// entry whose Match occurs in a request's system turns gives its
	// ValueErrorRate. Default none. See devtools/llmsim, Prompt errors.
	PromptErrors []SimPromptErrors `yaml:"prompt_errors"`
	// RepairFixRate: the chance each listed error is fixed by a repair.
	// Default 0.75 (default.yaml); 0 means repairs fix nothing.
	RepairFixRate float64 `yaml:"repair_fix_rate"`
	// Latency is a fixed latency per call. Default 0.
	Latency time.Duration `yaml:"latency"`
	// LatencyMedian and LatencyP99, when set, draw each call's latency from
	// a log-normal distribution with that median and 99th percentile.
	LatencyMedian time.Duration `yaml:"latency_median"`
	LatencyP99    time.Duration `yaml:"latency_p99"`
	// Transport faults, per call (first calls and repairs alike):
	// RateLimitedRate answers 429 with Retry-After; ServerErrorRate 500;
	// ForbiddenHTMLRate a non-JSON 403 page, as a proxy would.
	RateLimitedRate   float64 `yaml:"rate_limited_rate"`
	ServerErrorRate   float64 `yaml:"server_error_rate"`
	ForbiddenHTMLRate float64 `yaml:"forbidden_html_rate"`
	// RetryAfter is the Retry-After of simulated 429s. Default 1s.
	RetryAfter time.Duration `yaml:"retry_after"`
	// RequestsPerMinute and TokensPerMinute are enforced limits, answered
	// with 429, Retry-After and x-ratelimit-* headers beyond them; 0 means
	// none. Tokens count the prompt estimate plus max_completion_tokens.
	RequestsPerMinute int `yaml:"requests_per_minute"`
	TokensPerMinute   int `yaml:"tokens_per_minute"`
	// LimitsStartEmpty starts those buckets empty rather than full, so
	// that a measurement of a sustained rate is not flattered by a
	// minute's burst at the start.
	LimitsStartEmpty bool `yaml:"limits_start_empty"`
	// RefusalRate and ContentFilterRate: under the openai profile, a
	// first reply that is a refusal (message.refusal set, content null)
	// or cut by the content filter (finish_reason content_filter). Other
	// profiles never answer either.
	RefusalRate       float64 `yaml:"refusal_rate"`
	ContentFilterRate float64 `yaml:"content_filter_rate"`
	// SeveralToolCallsRate: in tools mode, a first reply that calls the
	// tool twice, under the profiles whose server may (generic, openai
	// unless parallel_tool_calls is false, ollama).
	SeveralToolCallsRate float64 `yaml:"several_tool_calls_rate"`
	// Reasoning makes the simulator answer as a reasoning model: the
	// reasoning text in the profile's field (vllm and llamacpp
	// reasoning_content, ollama reasoning), or, under generic, a
	// <think>...</think> block before the content. openai never shows
	// reasoning text.
	Reasoning bool `yaml:"reasoning"`
}

// SimulatorProfiles are the values of simulator.profile.
var SimulatorProfiles = []string{"generic", "openai", "vllm", "ollama", "llamacpp"}

// MaxMaxDeliver bounds worker.max_deliver. The consumer's BackOff holds
// one ack wait per delivery but the last, sent in the request that makes
// the consumer: a million of them (some 14 MB of JSON) passed NATS's 1 MB
// max_payload, so the worker retried making its consumer for ever, and
// 10^12 ran it out of memory at start. With the 15-minute step the
// schedule reaches by the sixth delivery, 100 deliveries retry a message
// that kills its worker for about a day.
const MaxMaxDeliver = 100

// Default returns the embedded default configuration.
func Default() *Config {
	c, err := Parse(nil)
	if err != nil {
		panic("config: embedded default.yaml: " + err.Error())
	}
	return c
}

// Load reads the configuration file at path; an empty path gives the
// embedded defaults. Fields the file leaves out take their defaults.
// Errors name the file and the bad field.
func Load(path string) (*Config, error) {
	if path == "" {
		return Default(), nil
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	c, err := Parse(b)
	if err != nil {
		return nil, fmt.Errorf("config %s: %w", path, err)
	}
	return c, nil
}

// Parse decodes YAML over the embedded defaults (config/default.yaml), so
// a file names only what it changes: a field it leaves out keeps its
// default, a map (such as prices.models) gains or replaces entries, and a
// list (such as schemas) replaces the default list. Unknown fields are
// errors, so a typo does not silently fall back to a default.
//
// A key the file names is taken as written: max_retries: 0 is no retries,
// and a 0 where 0 means nothing (commit_batch: 0, timeout: 0s) is an
// error naming the key, never a default. Defaults worked out from other
// keys (worker.in_progress_every, a schema entry's repair, prompt and
// rendering) follow the file's values when the file leaves them out.
func Parse(b []byte) (*Config, error) {
	var c Config
	if err := decodeStrict(DefaultYAML, &c); err != nil {
		return nil, yamlError(err)
	}
	var doc yaml.Node
	if err := yaml.Unmarshal(b, &doc); err != nil {
		return nil, yamlError(err)
	}
	if err := decodeStrict(b, &c); err != nil {
		return nil, yamlError(namePaths(err, &doc))
	}
	if !hasKey(&doc, "worker", "in_progress_every") {
		c.Worker.InProgressEvery = c.Worker.AckWait / 3
	}
	for i := range c.Schemas {
		c.Schemas[i] = c.Schemas[i].withDefaults()
	}
	c.Worker.MemoryLimitMB = cmp.Or(c.Worker.MemoryLimitMB, DefaultMemoryLimitMB)
	if len(c.Postgres.Pools) == 0 {
		c.Postgres.Pools = DefaultPools()
	}
	if err := c.Validate(); err != nil {
		return nil, err
	}
	return &c, nil
}

// decodeStrict decodes the YAML document doc (empty: none) onto c,
// leaving the fields it does not name as they are; unknown keys are
// errors.
func decodeStrict(doc []byte, c *Config) error {
	dec := yaml.NewDecoder(bytesReader(doc))
	dec.KnownFields(true)
	if err := dec.Decode(c); err != nil && !errors.Is(err, errEOF) {
		return err
	}
	return nil
}

// hasKey reports whether the YAML document doc has the mapping key at
// path (such as worker, in_progress_every).
func hasKey(doc *yaml.Node, path ...string) bool {
	n := doc
	if n.Kind == yaml.DocumentNode && len(n.Content) == 1 {
		n = n.Content[0]
	}
	for _, k := range path {
		if n.Kind != yaml.MappingNode {
			return false
		}
		var next *yaml.Node
		for i := 0; i+1 < len(n.Content); i += 2 {
			if n.Content[i].Value == k {
				next = n.Content[i+1]
			}
		}
		if next == nil {
			return false
		}
		n = next
	}
	return true
}

var typeError = regexp.MustCompile("^line (\\d+): cannot unmarshal (!!\\w+)(?: `(.*)`)? into (\\S+)$")

// goTypes words the decoder's Go types for people.
var goTypes = map[string]string{"time.Duration": "a duration (such as 30s, 1m30s or 500ms)", "int": "an integer",
	"int64": "an integer", "uint": "a whole number", "float64": "a number", "bool": "true or false", "string": "a string"}

// typeWords words the decoder's Go type t for people: goTypes, a list
// for a slice, and a mapping for a map or one of this package's structs
// (every named type of the configuration is a struct), so that no Go
// type name reaches the user.
func typeWords(t string) string {
	switch {
	case goTypes[t] != "":
		return goTypes[t]
	case strings.HasPrefix(t, "[]"):
		return "a list"
	case strings.HasPrefix(t, "map["), strings.HasPrefix(t, "config."):
		return "a mapping (key: value lines)"
	}
	return t
}

// namePaths rewrites each of the decoder's "line 3: cannot unmarshal
// !!str `abc` into time.Duration" in err as "worker.ack_wait: "abc" is not
// a duration (such as 30s, 1m30s or 500ms) (line 3)", finding the key in
// doc by the line and the value. Other errors are returned as they are.
func namePaths(err error, doc *yaml.Node) error {
	var te *yaml.TypeError
	if !errors.As(err, &te) {
		return err
	}
	msgs := make([]string, len(te.Errors))
	for i, m := range te.Errors {
		msgs[i] = m
		sm := typeError.FindStringSubmatch(m)
		if sm == nil {
			continue
		}
		line, _ := strconv.Atoi(sm[1])
		path := findValue(doc, "", line, sm[2], sm[3])
		if path == "" {
			continue
		}
		want := typeWords(sm[4])
		switch sm[2] {
		case "!!map":
			msgs[i] = fmt.Sprintf("%s: a mapping is not %s (line %d)", path, want, line)
		case "!!seq":
			msgs[i] = fmt.Sprintf("%s: a list is not %s (line %d)", path, want, line)
		default:
			msgs[i] = fmt.Sprintf("%s: %q is not %s (line %d)", path, sm[3], want, line)
		}
	}
	return errors.New(strings.Join(msgs, "; "))
}

// findValue returns the key path (such as ingest.webhooks[0].name) of
// the first value node below n on line whose tag is tag and whose value
// is value (as the decoder quotes it: cut to 7 bytes and "..." beyond
// 10), or "".
func findValue(n *yaml.Node, at string, line int, tag, value string) string {
	switch n.Kind {
	case yaml.DocumentNode:
		for _, c := range n.Content {
			if p := findValue(c, at, line, tag, value); p != "" {
				return p
			}
		}
		return ""
	case yaml.MappingNode:
		for i := 0; i+1 < len(n.Content); i += 2 {
			p := n.Content[i].Value
			if at != "" {
				p = at + "." + p
			}
			if v := n.Content[i+1]; v.Line == line && v.ShortTag() == tag && quoted(v.Value, value, tag) {
				return p
			}
			if p := findValue(n.Content[i+1], p, line, tag, value); p != "" {
				return p
			}
		}
	case yaml.SequenceNode:
		for i, v := range n.Content {
			p := fmt.Sprintf("%s[%d]", at, i)
			if v.Line == line && v.ShortTag() == tag && quoted(v.Value, value, tag) {
				return p
			}
			if p := findValue(v, p, line, tag, value); p != "" {
				return p
			}
		}
	}
	return ""
}

// quoted reports whether the decoder would show v as shown.
func quoted(v, shown, tag string) bool {
	if tag == "!!map" || tag == "!!seq" {
		return true
	}
	if len(v) > 10 {
		return v[:7]+"..." == shown
	}
	return v == shown
}

// withDefaults fills s's empty repair, prompt and rendering.
func (s Schema) withDefaults() Schema {
	s.Repair = cmp.Or(s.Repair, "regenerate")
	s.Prompt = cmp.Or(s.Prompt, "extract.v1")
	s.Rendering = cmp.Or(s.Rendering, "full")
	return s
}

// WithDefaults returns c with every zero field at its default, for a
// Config built in code; Parse does not use it (a key a file names is
// taken as written). Provider.MaxRetries is left as it is: 0 is no
// retries (its default, 4, is in default.yaml).
func (c Config) WithDefaults() Config {
	c.LLM.Model = cmp.Or(c.LLM.Model, "extractq-sim-1")
	c.LLM.RequestMode = cmp.Or(c.LLM.RequestMode, "response_format")
	c.LLM.MaxCompletionTokens = cmp.Or(c.LLM.MaxCompletionTokens, 1024)
	c.LLM.ContextWindowTokens = cmp.Or(c.LLM.ContextWindowTokens, 32768)
	c.LLM.Timeout = cmp.Or(c.LLM.Timeout, 60*time.Second)
	c.LLM.Provider = cmp.Or(c.LLM.Provider, "generic")
	if len(c.Schemas) == 0 {
		c.Schemas = []Schema{{ID: "customer_message", File: "customer_message.v1.json"}}
	}
	for i := range c.Schemas {
		c.Schemas[i] = c.Schemas[i].withDefaults()
	}
	c.Budget.MaxTokens = cmp.Or(c.Budget.MaxTokens, 16000)
	c.Budget.MaxCostUSD = cmp.Or(c.Budget.MaxCostUSD, 0.05)
	c.Prices.Version = cmp.Or(c.Prices.Version, "unpriced")
	c.Provider.InitialInterval = cmp.Or(c.Provider.InitialInterval, 500*time.Millisecond)
	c.Provider.MaxInterval = cmp.Or(c.Provider.MaxInterval, 30*time.Second)
	c.Provider.Multiplier = cmp.Or(c.Provider.Multiplier, 2)
	c.Provider.MaxElapsedTime = cmp.Or(c.Provider.MaxElapsedTime, 2*time.Minute)
	c.Provider.BreakerFailures = cmp.Or(c.Provider.BreakerFailures, 5)
	c.Provider.BreakerCooldown = cmp.Or(c.Provider.BreakerCooldown, 30*time.Second)
	c.Provider.Share = cmp.Or(c.Provider.Share, ShareReplicas)
	c.Provider.MaxReplicas = cmp.Or(c.Provider.MaxReplicas, 1)
	c.Provider.ShareHeartbeat = cmp.Or(c.Provider.ShareHeartbeat, 2*time.Second)
	c.Simulator.RetryAfter = cmp.Or(c.Simulator.RetryAfter, time.Second)
	c.Worker.Concurrency = cmp.Or(c.Worker.Concurrency, 8)
	c.Worker.AckWait = cmp.Or(c.Worker.AckWait, 60*time.Second)
	c.Worker.MaxDeliver = cmp.Or(c.Worker.MaxDeliver, 5)
	c.Worker.InProgressEvery = cmp.Or(c.Worker.InProgressEvery, c.Worker.AckWait/3)
	c.Worker.CommitBatch = cmp.Or(c.Worker.CommitBatch, 64)
	c.Worker.CommitWait = cmp.Or(c.Worker.CommitWait, 40*time.Millisecond)
	c.Worker.ShutdownGrace = cmp.Or(c.Worker.ShutdownGrace, 30*time.Second)
	c.Worker.GCPercent = cmp.Or(c.Worker.GCPercent, DefaultGCPercent)
	c.Worker.MemoryLimitMB = cmp.Or(c.Worker.MemoryLimitMB, DefaultMemoryLimitMB)
	c.NATS.Stream = cmp.Or(c.NATS.Stream, "EXTRACTQ")
	c.NATS.SubjectPrefix = cmp.Or(c.NATS.SubjectPrefix, "extractq")
	c.NATS.Consumer = cmp.Or(c.NATS.Consumer, "workers")
	c.NATS.Consumers = cmp.Or(c.NATS.Consumers, ConsumersShared)
	c.NATS.DuplicateWindow = cmp.Or(c.NATS.DuplicateWindow, 2*time.Minute)
	c.Relay.SweepEvery = cmp.Or(c.Relay.SweepEvery, 30*time.Second)
	c.Relay.SweepAge = cmp.Or(c.Relay.SweepAge, time.Minute)
	c.Relay.ReconcileEvery = cmp.Or(c.Relay.ReconcileEvery, time.Minute)
	c.Relay.ReconcileGrace = cmp.Or(c.Relay.ReconcileGrace, 5*time.Minute)
	c.NATS.Replicas = cmp.Or(c.NATS.Replicas, 1)
	c.Results = c.Results.withDefaults()
	c.Ingest.MaxTextBytes = cmp.Or(c.Ingest.MaxTextBytes, 32768)
	c.Ingest.MaxErrors = cmp.Or(c.Ingest.MaxErrors, 1000)
	c.NATS.RetryTime = cmp.Or(c.NATS.RetryTime, 2*time.Minute)
	c.Simulator.Addr = cmp.Or(c.Simulator.Addr, "127.0.0.1:8089")
	c.Simulator.Profile = cmp.Or(c.Simulator.Profile, "generic")
	c.Postgres = c.Postgres.withDefaults()
	return c
}

// Validate reports the first bad field by its YAML path.
func (c Config) Validate() error {
	switch c.LLM.RequestMode {
	case "response_format", "tools":
	default:
		return fmt.Errorf("llm.request_mode: %q is not response_format or tools", c.LLM.RequestMode)
	}
	if !slices.Contains(Providers, c.LLM.Provider) {
		return fmt.Errorf("llm.provider: %q is not one of %s", c.LLM.Provider, strings.Join(Providers, ", "))
	}
	if c.LLM.MaxCompletionTokens < 1 {
		return fmt.Errorf("llm.max_completion_tokens: %d is below 1", c.LLM.MaxCompletionTokens)
	}
	if len(c.Schemas) == 0 {
		return errors.New("schemas: empty: give at least one schema (the first is ingest's default)")
	}
	seen := map[string]bool{}
	for i, s := range c.Schemas {
		if s.ID == "" || s.File == "" {
			return fmt.Errorf("schemas[%d]: id and file are required", i)
		}
		if err := subjectTokens(s.ID); err != nil {
			return fmt.Errorf("schemas[%d].id: %q cannot end a NATS subject (<prefix>.runs.<schema id>): %w", i, s.ID, err)
		}
		if seen[s.ID] {
			return fmt.Errorf("schemas[%d].id: %q appears twice", i, s.ID)
		}
		seen[s.ID] = true
		switch s.Repair {
		case "regenerate", "patch":
		default:
			return fmt.Errorf("schemas[%d].repair: %q is not regenerate or patch", i, s.Repair)
		}
		if err := s.QA.validate(); err != nil {
			return fmt.Errorf("schemas[%d].qa.%w", i, err)
		}
		switch s.Rendering {
		case "full", "compact":
		default:
			return fmt.Errorf("schemas[%d].rendering: %q is not full or compact", i, s.Rendering)
		}
	}
	if c.Budget.MaxTokens < 1 {
		return fmt.Errorf("budget.max_tokens: %d is below 1", c.Budget.MaxTokens)
	}
	if !(c.Budget.MaxCostUSD > 0) || math.IsInf(c.Budget.MaxCostUSD, 1) {
		return fmt.Errorf("budget.max_cost_usd: %v is not a positive number", c.Budget.MaxCostUSD)
	}
	if c.Ingest.MaxTextBytes < 1 {
		return fmt.Errorf("ingest.max_text_bytes: %d is below 1", c.Ingest.MaxTextBytes)
	}
	if c.Ingest.MaxErrors < 1 {
		return fmt.Errorf("ingest.max_errors: %d is below 1", c.Ingest.MaxErrors)
	}
	if err := c.validateWebhooks(); err != nil {
		return err
	}
	for name, d := range map[string]time.Duration{
		"nats.duplicate_window": c.NATS.DuplicateWindow, "nats.retry_time": c.NATS.RetryTime, "worker.ack_wait": c.Worker.AckWait,
		"worker.in_progress_every": c.Worker.InProgressEvery, "worker.commit_wait": c.Worker.CommitWait,
		"worker.shutdown_grace": c.Worker.ShutdownGrace,
		"llm.timeout":           c.LLM.Timeout, "provider.initial_interval": c.Provider.InitialInterval,
		"provider.max_interval": c.Provider.MaxInterval, "provider.max_elapsed_time": c.Provider.MaxElapsedTime,
		"provider.breaker_cooldown": c.Provider.BreakerCooldown,
		"relay.sweep_age":           c.Relay.SweepAge, "relay.reconcile_grace": c.Relay.ReconcileGrace,
	} {
		if d <= 0 {
			return fmt.Errorf("%s: %v is not a positive duration", name, d)
		}
	}
	if c.Worker.InProgressEvery >= c.Worker.AckWait {
		return fmt.Errorf("worker.in_progress_every: %v is not below worker.ack_wait (%v): the ack wait would run out before it is renewed", c.Worker.InProgressEvery, c.Worker.AckWait)
	}
	for name, d := range map[string]time.Duration{"relay.sweep_every": c.Relay.SweepEvery, "relay.reconcile_every": c.Relay.ReconcileEvery} {
		if d == 0 {
			return fmt.Errorf("%s: 0s is no interval: give a positive one, or a negative one to turn the loop off", name)
		}
	}
	if c.LLM.ContextWindowTokens < 1 {
		return fmt.Errorf("llm.context_window_tokens: %d is below 1", c.LLM.ContextWindowTokens)
	}
	if c.Provider.BreakerFailures < 1 {
		return fmt.Errorf("provider.breaker_failures: %d is below 1", c.Provider.BreakerFailures)
	}
	if c.Worker.CommitBatch < 1 {
		return fmt.Errorf("worker.commit_batch: %d is below 1", c.Worker.CommitBatch)
	}
	for name, p := range c.Prices.Models {
		for _, v := range []float64{p.InputPerMTok, p.OutputPerMTok, p.CachedInputPerMTok} {
			if !(v >= 0) || math.IsInf(v, 1) {
				return fmt.Errorf("prices.models.%s: %v: prices must be numbers, not negative", name, v)
			}
		}
	}
	for name, n := range map[string]int{"provider.max_retries": c.Provider.MaxRetries,
		"provider.requests_per_minute": c.Provider.RequestsPerMinute, "provider.tokens_per_minute": c.Provider.TokensPerMinute} {
		if n < 0 {
			return fmt.Errorf("%s: %d is negative", name, n)
		}
	}
	if math.IsInf(c.Provider.Multiplier, 1) {
		return errors.New("provider.multiplier: +Inf is not a number: give a finite one, at least 1")
	}
	if !(c.Provider.Multiplier >= 1) {
		return fmt.Errorf("provider.multiplier: %v is below 1: each backoff must be at least the one before", c.Provider.Multiplier)
	}
	for name, n := range map[string]int64{"nats.max_msgs": c.NATS.MaxMsgs, "nats.max_bytes": c.NATS.MaxBytes} {
		if n < 0 {
			return fmt.Errorf("%s: %d is negative (0 is no limit)", name, n)
		}
	}
	if err := c.validateNATSNames(); err != nil {
		return err
	}
	if err := c.Results.validate(c.NATS); err != nil {
		return err
	}
	if c.NATS.Replicas < 1 || c.NATS.Replicas > 5 {
		return fmt.Errorf("nats.replicas: %d is not between 1 and 5", c.NATS.Replicas)
	}
	if c.NATS.CredentialsFile != "" && c.NATS.NKeySeedFile != "" {
		return errors.New("nats: credentials_file and nkey_seed_file are both set: a user is a JWT (credentials file) or an NKey, not both")
	}
	if (c.NATS.TLS.CertFile == "") != (c.NATS.TLS.KeyFile == "") {
		return errors.New("nats.tls: cert_file and key_file go together: set both or neither")
	}
	if err := c.validateConsumers(); err != nil {
		return err
	}
	if c.Worker.GCPercent < 1 {
		return fmt.Errorf("worker.gc_percent: %d is below 1", c.Worker.GCPercent)
	}
	if c.Worker.MemoryLimitMB < -1 {
		return fmt.Errorf("worker.memory_limit_mb: %d is below -1 (none)", c.Worker.MemoryLimitMB)
	}
	if c.Worker.Concurrency < 1 {
		return fmt.Errorf("worker.concurrency: %d is below 1", c.Worker.Concurrency)
	}
	if c.Worker.MaxDeliver < 2 {
		return fmt.Errorf("worker.max_deliver: %d is below 2", c.Worker.MaxDeliver)
	}
	if c.Worker.MaxDeliver > MaxMaxDeliver {
		return fmt.Errorf("worker.max_deliver: %d is above %d: the consumer carries one ack wait per delivery but the last (queue.BackOffSchedule), which must fit in one NATS message", c.Worker.MaxDeliver, MaxMaxDeliver)
	}
	for name, r := range map[string]float64{
		"invalid_json_rate": c.Simulator.InvalidJSONRate, "fenced_rate": c.Simulator.FencedRate,
		"prose_rate": c.Simulator.ProseRate, "wrong_type_rate": c.Simulator.WrongTypeRate,
		"missing_required_rate": c.Simulator.MissingRequiredRate, "wrong_enum_rate": c.Simulator.WrongEnumRate,
		"ungrounded_rate": c.Simulator.UngroundedRate, "several_tool_calls_rate": c.Simulator.SeveralToolCallsRate,
		"truncated_rate": c.Simulator.TruncatedRate, "repair_fix_rate": c.Simulator.RepairFixRate,
		"rate_limited_rate": c.Simulator.RateLimitedRate, "server_error_rate": c.Simulator.ServerErrorRate,
		"forbidden_html_rate": c.Simulator.ForbiddenHTMLRate,
		"refusal_rate":        c.Simulator.RefusalRate, "content_filter_rate": c.Simulator.ContentFilterRate,
	} {
		if !(r >= 0 && r <= 1) {
			return fmt.Errorf("simulator.%s: %v is not in [0, 1]", name, r)
		}
	}
	for i, e := range c.Simulator.PromptErrors {
		if e.Match == "" {
			return fmt.Errorf("simulator.prompt_errors[%d].match: empty: name a phrase of the prompt version's system turn", i)
		}
		if !(e.ValueErrorRate >= 0 && e.ValueErrorRate <= 1) {
			return fmt.Errorf("simulator.prompt_errors[%d].value_error_rate: %v is not in [0, 1]", i, e.ValueErrorRate)
		}
	}
	if !slices.Contains(SimulatorProfiles, c.Simulator.Profile) {
		return fmt.Errorf("simulator.profile: %q is not one of %s", c.Simulator.Profile, strings.Join(SimulatorProfiles, ", "))
	}
	switch c.Provider.Share {
	case ShareReplicas, ShareNone:
	default:
		return fmt.Errorf("provider.share: %q is not replicas or none", c.Provider.Share)
	}
	if c.Provider.MaxReplicas < 1 {
		return fmt.Errorf("provider.max_replicas: %d is below 1", c.Provider.MaxReplicas)
	}
	if c.Provider.ShareHeartbeat < 100*time.Millisecond {
		return fmt.Errorf("provider.share_heartbeat: %s is below 100ms", c.Provider.ShareHeartbeat)
	}
	if err := c.Postgres.validate(); err != nil {
		return err
	}
	return nil
}

// jetStreamNameChars are the characters JetStream refuses in a stream or
// consumer name (nats-server's isValidName: white space, '.', the
// wildcards '*' and '>', and path separators, since names become files).
const jetStreamNameChars = " \t\r\n.*>/\\"

// validateNATSNames checks nats.stream, nats.consumer, results.stream and
// nats.subject_prefix as JetStream reads names and subjects, so that a
// name the server would refuse stops the command at start naming its key,
// rather than a worker retrying to make the stream for ever.
func (c Config) validateNATSNames() error {
	names := []struct{ key, name string }{{"nats.stream", c.NATS.Stream}, {"nats.consumer", c.NATS.Consumer}}
	if c.Results.Stream != "" {
		names = append(names, struct{ key, name string }{"results.stream", c.Results.Stream})
	}
	for _, n := range names {
		if n.name == "" {
			return fmt.Errorf("%s: empty: JetStream needs a name", n.key)
		}
		if i := strings.IndexAny(n.name, jetStreamNameChars); i >= 0 {
			return fmt.Errorf("%s: %q cannot name a JetStream stream or consumer (%q at byte %d): no spaces, '.', '*', '>', '/' or '\\'", n.key, n.name, n.name[i], i)
		}
	}
	p := c.NATS.SubjectPrefix
	if p == "" {
		return errors.New("nats.subject_prefix: empty: subjects are <prefix>.runs.<schema id>")
	}
	if i := strings.IndexAny(p, " \t\r\n*>"); i >= 0 {
		return fmt.Errorf("nats.subject_prefix: %q is not a NATS subject prefix (%q at byte %d): no white space, and no wildcard '*' or '>'", p, p[i], i)
	}
	if slices.Contains(strings.Split(p, "."), "") {
		return fmt.Errorf("nats.subject_prefix: %q has an empty token: no '.' at its start or end, and none twice in a row", p)
	}
	return nil
}

// subjectTokens checks a schema id as the last tokens of a subject
// (<prefix>.runs.<schema id>, <prefix>.results.<schema id>.…): NATS
// subjects hold no white space, a '*' or '>' is a wildcard, which a
// publish may not name, and a token is never empty. A '.' is allowed here
// (the id then spans tokens); per_schema consumer names refuse it too.
func subjectTokens(id string) error {
	if i := strings.IndexFunc(id, func(r rune) bool { return r == '*' || r == '>' || unicode.IsSpace(r) }); i >= 0 {
		r, _ := utf8.DecodeRuneInString(id[i:])
		return fmt.Errorf("%q at byte %d: no white space, and no wildcard '*' or '>'", r, i)
	}
	if slices.Contains(strings.Split(id, "."), "") {
		return errors.New("an empty token: no '.' at its start or end, and none twice in a row")
	}
	return nil
}

// validateConsumers checks nats.consumers and worker.schema.
func (c Config) validateConsumers() error {
	switch c.NATS.Consumers {
	case ConsumersShared:
		if c.Worker.Schema != "" {
			return fmt.Errorf("worker.schema: %q is set but nats.consumers is shared: one consumer serves every schema; set nats.consumers: per_schema for a pool per schema, or unset worker.schema", c.Worker.Schema)
		}
	case ConsumersPerSchema:
		for i, s := range c.Schemas {
			// JetStream's rule for consumer names (nats-server's
			// isValidName): no whitespace, '.', '*', '>', path separators.
			if strings.ContainsAny(s.ID, " \t\r\n.*>/\\") {
				return fmt.Errorf("schemas[%d].id: %q cannot name a consumer (nats.consumers per_schema): no spaces, '.', '*', '>', '/' or '\\'", i, s.ID)
			}
		}
		if c.Worker.Schema != "" {
			if _, ok := c.SchemaByID(c.Worker.Schema); !ok {
				ids := make([]string, len(c.Schemas))
				for i, s := range c.Schemas {
					ids[i] = s.ID
				}
				return fmt.Errorf("worker.schema: %q is not a configured schema (schemas: %s)", c.Worker.Schema, strings.Join(ids, ", "))
			}
		}
	default:
		return fmt.Errorf("nats.consumers: %q is not %s or %s", c.NATS.Consumers, ConsumersShared, ConsumersPerSchema)
	}
	return nil
}

// SchemaByID returns the configured schema with id, or false.
func (c Config) SchemaByID(id string) (Schema, bool) {
	for _, s := range c.Schemas {
		if s.ID == id {
			return s, true
		}
	}
	return Schema{}, false
}

// DefaultSchema returns the first configured schema.
func (c Config) DefaultSchema() Schema { return c.Schemas[0] }

var unknownField = regexp.MustCompile(`field (\S+) not found in type config\.(\w+)`)

// yamlError rewrites the decoder's Go-speak for people: "field concurency
// not found in type config.Worker" becomes "unknown key concurency in
// worker".
func yamlError(err error) error {
	msg := unknownField.ReplaceAllStringFunc(err.Error(), func(m string) string {
		sm := unknownField.FindStringSubmatch(m)
		section := map[string]string{"Config": "the file", "LLM": "llm", "Provider": "provider", "Schema": "schemas",
			"Budget": "budget", "Prices": "prices", "Price": "prices.models", "Worker": "worker", "NATS": "nats", "NATSTLS": "nats.tls",
			"Ingest": "ingest", "Simulator": "simulator", "Relay": "relay",
			"Webhook": "ingest.webhooks", "WebhookSignature": "ingest.webhooks[].signature"}[sm[2]]
		if section == "" {
			section = strings.ToLower(sm[2])
		}
		return fmt.Sprintf("unknown key %q in %s", sm[1], section)
	})
	return errors.New(strings.TrimPrefix(msg, "yaml: "))
}

// validate names the bad field of q, as "share: ..."; nil q is valid.
func (q *QA) validate() error {
	if q == nil {
		return nil
	}
	if !(q.Share >= 0 && q.Share <= 1) {
		return fmt.Errorf("share: %v is not in [0, 1]", q.Share)
	}
	if q.StratifyBy != "" && !strings.HasPrefix(q.StratifyBy, "/") {
		return fmt.Errorf("stratify_by: %q is not a JSON Pointer (it starts with /)", q.StratifyBy)
	}
	if len(q.Strata) > 0 && q.StratifyBy == "" {
		return fmt.Errorf("strata: given without stratify_by")
	}
	for k, v := range q.Strata {
		if !(v >= 0 && v <= 1) {
			return fmt.Errorf("strata[%q]: %v is not in [0, 1]", k, v)
		}
	}
	return nil
}

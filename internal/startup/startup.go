// Package startup is what every program of the module does as it
// starts, the product's commands (cmd/...) and the development harnesses
// (devtools/cmd/...) alike: read the connection settings from the
// environment (Env), load the configuration file, build the logger, catch
// SIGINT and SIGTERM, profile the CPU. Only programs' main packages use
// it: it is the one place the environment is read (STYLE.md). The
// wiring only the commands share (opening the store, connecting to NATS)
// is cmd/internal/cmdconfig.
package startup

import (
	"cmp"
	"context"
	"fmt"
	"os"
	"strings"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/extractq/extractq/config"
)

// Defaults of the connection variables: the local services of the project's
// machines and the LLM simulator.
const (
	DefaultDatabaseURL = "postgres://postgres@127.0.0.1:5432/extractq?sslmode=disable"
	DefaultNATSURL     = "nats://127.0.0.1:4222"
	DefaultLLMBaseURL  = "http://127.0.0.1:8089/v1"
)

// Env is the connection settings, read from the environment.
type Env struct {
	DatabaseURL string // DATABASE_URL
	NATSURL     string // NATS_URL
	LLMBaseURL  string // LLM_BASE_URL, an OpenAI-compatible base URL ending in /v1
	LLMAPIKey   string // LLM_API_KEY; never logged
	LLMModel    string // LLM_MODEL; overrides the configuration's llm.model
	Config      string // CONFIG, the configuration file path; empty means the embedded defaults

	// NATS security files, overriding the configuration's nats section when
	// set (LoadConfig).
	NATSCreds string // NATS_CREDS: nats.credentials_file
	NATSNKey  string // NATS_NKEY: nats.nkey_seed_file
	NATSCA    string // NATS_CA: nats.tls.ca_file
	NATSCert  string // NATS_CERT: nats.tls.cert_file
	NATSKey   string // NATS_KEY: nats.tls.key_file

	// WorkerSchema is WORKER_SCHEMA: worker.schema, the one schema whose
	// consumer a worker of a pool per schema serves.
	WorkerSchema string
}

// GetEnv returns the value of the environment variable key, or def.
func GetEnv(key, def string) string {
	return cmp.Or(os.Getenv(key), def)
}

// ReadEnv reads the connection settings.
func ReadEnv() Env {
	return Env{
		DatabaseURL: GetEnv("DATABASE_URL", DefaultDatabaseURL),
		NATSURL:     GetEnv("NATS_URL", DefaultNATSURL),
		LLMBaseURL:  GetEnv("LLM_BASE_URL", DefaultLLMBaseURL),
		LLMAPIKey:   GetEnv("LLM_API_KEY", "simulator"),
		LLMModel:    os.Getenv("LLM_MODEL"),
		Config:      os.Getenv("CONFIG"),
		NATSCreds:   os.Getenv("NATS_CREDS"),
		NATSNKey:    os.Getenv("NATS_NKEY"),
		NATSCA:      os.Getenv("NATS_CA"),
		NATSCert:    os.Getenv("NATS_CERT"),
		NATSKey:     os.Getenv("NATS_KEY"),

		WorkerSchema: os.Getenv("WORKER_SCHEMA"),
	}
}

// Redacted returns e for logs: the URLs without passwords, tokens or
// secret parameters (RedactDatabaseURL, RedactURLList), no API key, only
// whether each security file is set.
func (e Env) Redacted() []zap.Field {
	return []zap.Field{
		zap.String("database_url", RedactDatabaseURL(e.DatabaseURL)),
		zap.String("nats_url", RedactURLList(e.NATSURL)),
		zap.String("llm_base_url", RedactURLList(e.LLMBaseURL)),
		zap.Bool("llm_api_key_set", e.LLMAPIKey != ""),
		zap.String("config", cmp.Or(e.Config, "(embedded defaults)")),
		zap.Bool("nats_creds_set", e.NATSCreds != ""), zap.Bool("nats_nkey_set", e.NATSNKey != ""),
		zap.Bool("nats_tls_files_set", e.NATSCA != "" || e.NATSCert != "" || e.NATSKey != ""),
	}
}

// NewLogger returns a production zap logger writing JSON to stderr at
// level ("debug", "info", "warn", "error"), named for the component.
func NewLogger(component, level string) (*zap.Logger, error) {
	lvl, err := zapcore.ParseLevel(cmp.Or(level, "info"))
	if err != nil {
		return nil, fmt.Errorf("log level %q: %w", level, err)
	}
	zc := zap.NewProductionConfig()
	zc.Level = zap.NewAtomicLevelAt(lvl)
	zc.Sampling = nil
	zc.EncoderConfig.TimeKey = "time"
	zc.EncoderConfig.EncodeTime = zapcore.ISO8601TimeEncoder
	log, err := zc.Build()
	if err != nil {
		return nil, err
	}
	return log.Named(component), nil
}

// LoadConfig loads the configuration file at path (empty: embedded
// defaults) and applies LLM_MODEL and the NATS security variables
// (NATS_CREDS, NATS_NKEY, NATS_CA, NATS_CERT, NATS_KEY) and
// WORKER_SCHEMA (worker.schema), each replacing its key when set. The
// result is validated again: NATS_NKEY with a configured credentials file
// is an error, as both in the file are, and so is WORKER_SCHEMA with
// nats.consumers shared. An llm.model that names no model, LLM_MODEL
// unset, is an error naming the key.
func LoadConfig(path string, env Env) (*config.Config, error) {
	cfg, err := config.Load(path)
	if err != nil {
		return nil, err
	}
	if env.LLMModel != "" {
		cfg.LLM.Model = env.LLMModel
	}
	n := &cfg.NATS
	for _, o := range []struct {
		key *string
		env string
	}{
		{&n.CredentialsFile, env.NATSCreds}, {&n.NKeySeedFile, env.NATSNKey},
		{&n.TLS.CAFile, env.NATSCA}, {&n.TLS.CertFile, env.NATSCert}, {&n.TLS.KeyFile, env.NATSKey},
	} {
		if o.env != "" {
			*o.key = o.env
		}
	}
	if env.WorkerSchema != "" {
		cfg.Worker.Schema = env.WorkerSchema
	}
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("configuration with the NATS_* and WORKER_SCHEMA variables: %w", err)
	}
	// A call naming no model is refused by every server (400) and priced
	// at nothing: say so at start rather than at the first call.
	if strings.TrimSpace(cfg.LLM.Model) == "" {
		return nil, fmt.Errorf("llm.model: %q names no model, and LLM_MODEL is not set: name the model each call sends", cfg.LLM.Model)
	}
	return cfg, nil
}

// Context returns a context that ends on SIGINT or SIGTERM.
func Context() (context.Context, context.CancelFunc) {
	return signalContext()
}

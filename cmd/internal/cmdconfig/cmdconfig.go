// Package cmdconfig is the wiring the product's commands share, as
// pkgsite's cmd/internal/cmdconfig is: opening the store (waiting for
// Postgres, checking the migrations), connecting to NATS and making sure
// of the stream, building the LLM client, and failing at start-up.
// Commands only import it (Go's internal rule: nothing outside cmd/ can);
// what the development harnesses need too (the environment, the
// configuration, the logger) is internal/startup.
package cmdconfig

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/cenkalti/backoff/v5"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nuid"
	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/extractq/extractq/config"
	"github.com/extractq/extractq/internal/startup"
	"github.com/extractq/extractq/pipeline"
	"github.com/extractq/extractq/provider"
	"github.com/extractq/extractq/queue"
	"github.com/extractq/extractq/store"
)

// Start-up steps: the Step of a *StartError.
const (
	StepOpenStore   = "opening Postgres"
	StepCheckStore  = "checking the database"
	StepConnectNATS = "connecting to NATS"
	StepStream      = "creating stream"
)

// StartError is a start-up step that failed.
type StartError struct {
	Step string // one of the Step constants
	Err  error
	// Setting says the failure is a wrong setting (a bad NATS security
	// file, credentials or TLS the server refused), not a service that is
	// down: waiting or going on without the service will not mend it.
	Setting bool
}

func (e *StartError) Error() string { return e.Step + ": " + e.Err.Error() }
func (e *StartError) Unwrap() error { return e.Err }

// Step returns the step err failed at and its own error: a *StartError's
// Step and Err, else "" and err.
func Step(err error) (string, error) {
	if se, ok := errors.AsType[*StartError](err); ok {
		return se.Step, se.Err
	}
	return "", err
}

// IsSetting reports whether err is a *StartError of a wrong setting
// (StartError.Setting): a command that would go on without the service
// stops at start-up instead.
func IsSetting(err error) bool {
	se, ok := errors.AsType[*StartError](err)
	return ok && se.Setting
}

// StoreOptions say how OpenStore opens the store.
type StoreOptions struct {
	// Wait is how long a Postgres that does not answer (restarting, failing
	// over) is waited for while the migrations are checked; 0 checks once.
	Wait time.Duration
	// Create creates the database first when it does not exist
	// (store.EnsureDatabase): for migrate.
	Create bool
	// Unmigrated skips the check that every migration is applied: for
	// migrate, which applies them.
	Unmigrated bool
	// Command and Budget size the pool from the deployment's connection
	// budget (config.Postgres.PoolSize of Command); with no budget
	// configured the pool is the URL's pool_max_conns or
	// store.DefaultMaxConns.
	Command string
	Budget  config.Postgres
}

// OpenStore opens the store at env.DatabaseURL (store.Open) and checks
// that every migration this build knows is applied
// (store.RequireMigrated), waiting up to o.Wait for Postgres to answer.
// The error is a *StartError of StepOpenStore or StepCheckStore; the
// store is closed then.
func OpenStore(ctx context.Context, env startup.Env, log *zap.Logger, o StoreOptions) (*store.Store, error) {
	if o.Create {
		if err := store.EnsureDatabase(ctx, env.DatabaseURL); err != nil {
			return nil, &StartError{Step: StepOpenStore, Err: err}
		}
	}
	maxConns, err := o.Budget.PoolSize(o.Command)
	if err != nil {
		return nil, &StartError{Step: StepOpenStore, Err: err}
	}
	if maxConns > 0 {
		log.Info("connection budget", zap.String("command", o.Command), zap.Int("pool_max_conns", maxConns),
			zap.Int("max_connections", o.Budget.MaxConnections))
	}
	st, err := store.OpenWith(ctx, env.DatabaseURL, log, store.OpenOptions{MaxConns: maxConns})
	if err != nil {
		return nil, &StartError{Step: StepOpenStore, Err: err}
	}
	if o.Unmigrated {
		return st, nil
	}
	check := func() error { return st.RequireMigrated(ctx) }
	if o.Wait > 0 {
		err = store.Retry(ctx, o.Wait, check)
	} else {
		err = check()
	}
	if err != nil {
		st.Close()
		return nil, &StartError{Step: StepCheckStore, Err: err}
	}
	return st, nil
}

// ConnectNATS connects to env.NATSURL as name (queue.Connect), giving up
// after wait (0: queue.ConnectTimeout, unless ctx has a deadline). NATS_URL
// may list several servers, comma separated (a cluster's): all reach
// nats.Connect, which tries them in turn and reconnects to any. n's
// credentials file or NKey seed and TLS files (nats.credentials_file,
// nats.nkey_seed_file, nats.tls; see queue.SecurityOptions) are checked
// before connecting. The error is a *StartError of StepConnectNATS, with
// Setting set for a bad file and for a connection the server or this
// client refused (queue.IsRefused).
func ConnectNATS(ctx context.Context, env startup.Env, n config.NATS, name string, log *zap.Logger, wait time.Duration) (*nats.Conn, jetstream.JetStream, error) {
	opts, err := queue.SecurityOptions(n)
	if err != nil {
		return nil, nil, &StartError{Step: StepConnectNATS, Err: namedByEnv(err, env), Setting: true}
	}
	if wait > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, wait)
		defer cancel()
	}
	nc, js, err := queue.Connect(ctx, env.NATSURL, name, log, opts...)
	if err != nil {
		return nil, nil, &StartError{Step: StepConnectNATS, Err: err, Setting: queue.IsRefused(err)}
	}
	return nc, js, nil
}

// natsFileVars are the NATS security keys and the variables that set
// them (startup.LoadConfig), for errors.
var natsFileVars = []struct {
	key, name string
	value     func(startup.Env) string
}{
	{"nats.credentials_file", "NATS_CREDS", func(e startup.Env) string { return e.NATSCreds }},
	{"nats.nkey_seed_file", "NATS_NKEY", func(e startup.Env) string { return e.NATSNKey }},
	{"nats.tls.ca_file", "NATS_CA", func(e startup.Env) string { return e.NATSCA }},
	{"nats.tls.cert_file", "NATS_CERT", func(e startup.Env) string { return e.NATSCert }},
	{"nats.tls.key_file", "NATS_KEY", func(e startup.Env) string { return e.NATSKey }},
}

// namedByEnv returns err (of queue.SecurityOptions, naming a key and its
// file: "nats.credentials_file a.creds: no such file") with the variable
// that set the key named beside it when the environment set it
// ("nats.credentials_file (set by NATS_CREDS) a.creds: ..."), so the
// operator knows where to fix it. err stays wrapped.
func namedByEnv(err error, env startup.Env) error {
	msg := err.Error()
	for _, v := range natsFileVars {
		if path := v.value(env); path != "" {
			msg = strings.ReplaceAll(msg, v.key+" "+path, v.key+" (set by "+v.name+") "+path)
		}
	}
	if msg == err.Error() {
		return err
	}
	return &envNamedError{msg: msg, err: err}
}

// envNamedError is an error with the variables that set its keys named.
type envNamedError struct {
	msg string
	err error
}

func (e *envNamedError) Error() string { return e.msg }
func (e *envNamedError) Unwrap() error { return e.err }

// EnsureStream creates the stream of n, or checks it, retrying as
// RetryStartup does. The error is a *StartError of StepStream.
func EnsureStream(ctx context.Context, log *zap.Logger, js jetstream.JetStream, n config.NATS) error {
	err := RetryStartup(ctx, log, StepStream, func() error {
		_, err := queue.EnsureStream(ctx, js, n)
		return err
	})
	if err != nil {
		return &StartError{Step: StepStream, Err: err}
	}
	return nil
}

// NewExtractor builds the pipeline's extractor for the configured model on
// the endpoint env names, calling through a provider.Transport (retries,
// rate limits, circuit breaker; configuration section provider) whose
// metrics are registered on reg (nil: not registered). It returns the
// transport too: its Ready and WaitReady tell when the breaker is open.
func NewExtractor(cfg *config.Config, env startup.Env, reg prometheus.Registerer, log *zap.Logger) (*pipeline.Extractor, *provider.Transport) {
	base := http.DefaultTransport.(*http.Transport).Clone()
	base.MaxIdleConnsPerHost = max(cfg.Worker.Concurrency, 2)
	tr := provider.New(cfg.Provider, base, reg, log)
	price := cfg.Prices.Models[cfg.LLM.Model]
	if _, ok := cfg.Prices.Models[cfg.LLM.Model]; !ok {
		log.Warn("model has no price in the price table; its calls cost 0", zap.String("model", cfg.LLM.Model),
			zap.String("price_version", cfg.Prices.Version))
	}
	ext := pipeline.NewExtractor(provider.NewChatClient(tr, env.LLMBaseURL, env.LLMAPIKey), pipeline.ExtractorConfig{
		Model: cfg.LLM.Model, RequestMode: cfg.LLM.RequestMode, MaxCompletionTokens: cfg.LLM.MaxCompletionTokens,
		Provider:            cfg.LLM.Provider,
		ContextWindowTokens: cfg.LLM.ContextWindowTokens, Timeout: cfg.LLM.Timeout,
		Budget:       pipeline.Budget{MaxTokens: cfg.Budget.MaxTokens, MaxCostUSD: cfg.Budget.MaxCostUSD},
		Price:        pipeline.Price{InputPerMTok: price.InputPerMTok, CachedInputPerMTok: price.CachedInputPerMTok, OutputPerMTok: price.OutputPerMTok},
		PriceVersion: cfg.Prices.Version,
		Logger:       log,
		FixedParts:   tr.FixedParts(),
	})
	return ext, tr
}

// Fatal logs err (without a stack trace: the error says where), writes
// it as one plain line on stderr for the person who started the command,
// and exits 1.
func Fatal(log *zap.Logger, msg string, err error) {
	log.WithOptions(zap.AddStacktrace(zap.FatalLevel)).Error(msg, zap.Error(err))
	_ = log.Sync()
	fmt.Fprintf(os.Stderr, "%s: %s: %v\n", filepath.Base(os.Args[0]), msg, err)
	os.Exit(1)
}

// FatalUnlessStopped is Fatal, except that when ctx has ended (SIGINT or
// SIGTERM arrived while the command was starting) it logs that the
// command stopped during start-up and exits 0: a stop asked for is not a
// failure, and nothing was taken from the queue yet.
func FatalUnlessStopped(ctx context.Context, log *zap.Logger, msg string, err error) {
	if ctx.Err() != nil {
		log.Info("stopped while starting", zap.String("step", msg), zap.Error(err))
		_ = log.Sync()
		os.Exit(0)
	}
	Fatal(log, msg, err)
}

// StartupRetryTime is how long a start-up step waits for a NATS server
// or Postgres that is restarting (RetryStartup, ResultsSwitch) before the
// command gives up.
const StartupRetryTime = 2 * time.Minute

// RetryStartup runs a start-up step (creating a stream or a consumer) until
// it succeeds, retrying any error with backoff for up to StartupRetryTime, so a
// command started while NATS or Postgres restarts waits instead of
// exiting. Each failure is logged with what.
func RetryStartup(ctx context.Context, log *zap.Logger, what string, step func() error) error {
	_, err := backoff.Retry(ctx, func() (struct{}, error) {
		err := step()
		var apiErr *jetstream.APIError
		if errors.As(err, &apiErr) && apiErr.Code != 503 && apiErr.Code != 408 {
			// The server refused the request itself (a bad stream setting):
			// waiting will not change its mind.
			return struct{}{}, backoff.Permanent(err)
		}
		return struct{}{}, err
	}, backoff.WithBackOff(backoff.NewExponentialBackOff()), backoff.WithMaxElapsedTime(StartupRetryTime),
		backoff.WithNotify(func(err error, next time.Duration) {
			log.Warn(what+" failed; retrying", zap.Error(err), zap.Duration("retry_in", next))
		}))
	return err
}

// ShareLimit makes the worker replicas share the provider's limits and
// pauses (config provider.share, queue.LimitShare): it starts keeping
// this replica counted and transport's share current, and returns a
// function that stops that and waits for it. With provider.share none
// it does nothing. The error is a bad replica id.
func ShareLimit(ctx context.Context, cfg *config.Config, nc *nats.Conn, js jetstream.JetStream, transport *provider.Transport, log *zap.Logger) (stop func(), err error) {
	if cfg.Provider.Share == config.ShareNone || transport == nil {
		return func() {}, nil
	}
	host, _ := os.Hostname()
	id := strings.Map(func(r rune) rune {
		if r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_' {
			return r
		}
		return '_'
	}, fmt.Sprintf("%s-%d-%s", cmp.Or(host, "worker"), os.Getpid(), nuid.Next()[16:]))
	ls, err := queue.NewLimitShare(queue.LimitShareConfig{
		JS: js, Conn: nc, NATS: cfg.NATS, ID: id, Heartbeat: cfg.Provider.ShareHeartbeat, MaxReplicas: cfg.Provider.MaxReplicas,
		SetShare: transport.SetShare,
		Pause:    func(until time.Time, cause string) { transport.PauseFrom(until, provider.ErrorClass(cause)) },
		Logger:   log,
	})
	if err != nil {
		return nil, err
	}
	transport.OnOpen(func(cause provider.ErrorClass, until time.Time) { ls.Announce(until, string(cause)) })
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = ls.Run(ctx)
	}()
	return func() { cancel(); <-done }, nil
}

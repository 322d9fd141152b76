package queue

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/zap"

	"github.com/extractq/extractq/config"
)

// Replicas of the worker share one provider limit (requests and tokens per
// minute) by counting each other. Each replica keeps a key of its own in
// a JetStream key-value bucket alive, putting it every Heartbeat; the
// bucket's entries age out after three heartbeats (its MaxAge, which
// NATS 2.9 supports), so a replica that dies or is cut off drops out of
// the count within that. Every heartbeat each replica lists the bucket's
// keys and takes 1/n of the limit, n the live replicas: a smaller share
// at once, a larger one once two counts in a row give it, so that a
// replica joining takes its share only after the others have seen it
// and lowered theirs (a replica leaving is rebalanced within two
// heartbeats). Until the count
// can be read, and whenever it cannot (the bucket unreachable), a
// replica takes 1/MaxReplicas, so that the most replicas the autoscaler
// may start still stay within the limit.
//
// A replica whose breaker opens (quota, credentials, an outage) tells
// the others on the core NATS subject <prefix>.provider.pause, and each
// pauses until the cooldown's end (provider.Transport.PauseFrom).

// LimitShareConfig configures RunLimitShare.
type LimitShareConfig struct {
	// JS and NATS name the bucket (<stream>_LIMITS) and the pause subject.
	JS   jetstream.JetStream
	Conn *nats.Conn
	NATS config.NATS
	// ID is this replica's key: unique among the live replicas (the host
	// name and process id, say; letters, digits, '-', '_' and '.').
	ID string
	// Heartbeat is how often the key is put and the replicas counted.
	// Default 2s.
	Heartbeat time.Duration
	// MaxReplicas is the most replicas that may run at once: the share
	// taken while the count is unknown is 1/MaxReplicas. Default 1.
	MaxReplicas int
	// SetShare receives the share, in (0, 1], each time it changes
	// (provider.Transport.SetShare).
	SetShare func(share float64)
	// Pause receives another replica's pause (provider.Transport.PauseFrom);
	// nil: pauses are not listened to.
	Pause func(until time.Time, cause string)
	// Logger may be nil.
	Logger *zap.Logger
}

// LimitBucket returns the name of the key-value bucket of n's stream.
func LimitBucket(n config.NATS) string { return n.Stream + "_LIMITS" }

// PauseSubject returns the core NATS subject replicas announce a pause on.
func PauseSubject(n config.NATS) string { return n.SubjectPrefix + ".provider.pause" }

// pauseEvent is a pause announcement's body.
type pauseEvent struct {
	From  string    `json:"from"`
	Until time.Time `json:"until"`
	Cause string    `json:"cause"`
}

// LimitShare is a running share: RunLimitShare's handle for announcing
// this replica's pauses.
type LimitShare struct {
	cfg LimitShareConfig
	log *zap.Logger
}

// NewLimitShare checks cfg and returns a LimitShare; Run starts it.
func NewLimitShare(cfg LimitShareConfig) (*LimitShare, error) {
	if cfg.JS == nil || cfg.Conn == nil || cfg.SetShare == nil {
		return nil, errors.New("queue.NewLimitShare: JS, Conn and SetShare are required")
	}
	if cfg.ID == "" || !validKey(cfg.ID) {
		return nil, fmt.Errorf("queue.NewLimitShare: replica id %q: want letters, digits, '-', '_' or '.'", cfg.ID)
	}
	if cfg.Heartbeat <= 0 {
		cfg.Heartbeat = 2 * time.Second
	}
	cfg.MaxReplicas = max(cfg.MaxReplicas, 1)
	log := cfg.Logger
	if log == nil {
		log = zap.NewNop()
	}
	return &LimitShare{cfg: cfg, log: log.Named("limitshare")}, nil
}

func validKey(s string) bool {
	for _, r := range s {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '-', r == '_', r == '.':
		default:
			return false
		}
	}
	return true
}

// Announce tells the other replicas to pause until until for cause
// (provider.Transport.OnOpen). A failure is logged, not returned: each
// replica's own breaker still stops it.
func (s *LimitShare) Announce(until time.Time, cause string) {
	b, _ := json.Marshal(pauseEvent{From: s.cfg.ID, Until: until, Cause: cause})
	if err := s.cfg.Conn.Publish(PauseSubject(s.cfg.NATS), b); err != nil {
		s.log.Warn("announcing a provider pause to the other replicas", zap.Error(err))
	}
}

// Run keeps this replica's key alive and its share current until ctx
// ends, then deletes its key so the others rebalance at once. It returns
// nil then; it never gives up on an unreachable bucket (the share falls
// back to 1/MaxReplicas meanwhile).
func (s *LimitShare) Run(ctx context.Context) error {
	cfg := s.cfg
	if cfg.Pause != nil {
		sub, err := cfg.Conn.Subscribe(PauseSubject(cfg.NATS), func(m *nats.Msg) {
			var ev pauseEvent
			if json.Unmarshal(m.Data, &ev) != nil || ev.From == cfg.ID {
				return
			}
			cfg.Pause(ev.Until, ev.Cause)
		})
		if err != nil {
			return fmt.Errorf("queue: subscribing to %s: %w", PauseSubject(cfg.NATS), err)
		}
		defer sub.Unsubscribe()
	}
	fallback := 1 / float64(cfg.MaxReplicas)
	share := 0.0
	counted := 0.0 // the share the last count gave; 0 before one or after a failed one
	set := func(v float64, n int, why string) {
		if v == share {
			return
		}
		share = v
		cfg.SetShare(v)
		s.log.Info("provider limit share", zap.Float64("share", v), zap.Int("replicas", n), zap.String("why", why))
	}
	set(fallback, 0, "starting: the replicas are not counted yet")

	var kv jetstream.KeyValue
	tick := time.NewTicker(cfg.Heartbeat)
	defer tick.Stop()
	for {
		n, err := s.beat(ctx, &kv)
		switch {
		case err != nil && ctx.Err() == nil:
			s.log.Warn("cannot count the replicas sharing the provider limit: taking 1/max_replicas",
				zap.Int("max_replicas", cfg.MaxReplicas), zap.Error(err))
			set(fallback, 0, "bucket unreachable")
			counted = 0
		case err == nil:
			// Down at once, up only after a second count: the others
			// see a replica that joins at their next heartbeat and only
			// then lower theirs, so one that took its share at its first
			// count would, with them, overshoot the limit for up to a
			// heartbeat (bench scenario G: 2.1% of calls answered 429
			// with the simulator's bucket starting empty).
			v := 1 / float64(n)
			up := min(v, counted)
			counted = v
			if v < share {
				set(v, n, "replicas counted")
			} else if up > share {
				set(up, n, "replicas counted twice")
			}
		}
		select {
		case <-ctx.Done():
			if kv != nil {
				dctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
				_ = kv.Purge(dctx, cfg.ID)
				cancel()
			}
			return nil
		case <-tick.C:
		}
	}
}

// beat puts this replica's key and counts the live keys (this one's
// included, so at least 1). It creates the bucket when missing.
func (s *LimitShare) beat(ctx context.Context, kv *jetstream.KeyValue) (int, error) {
	cfg := s.cfg
	ctx, cancel := context.WithTimeout(ctx, max(cfg.Heartbeat, time.Second))
	defer cancel()
	if *kv == nil {
		b, err := cfg.JS.CreateOrUpdateKeyValue(ctx, jetstream.KeyValueConfig{
			Bucket:      LimitBucket(cfg.NATS),
			Description: "extractq worker replicas sharing the provider's rate limit (queue.LimitShare)",
			History:     1,
			TTL:         3 * cfg.Heartbeat,
			Replicas:    max(cfg.NATS.Replicas, 1),
		})
		if err != nil {
			return 0, fmt.Errorf("bucket %s: %w", LimitBucket(cfg.NATS), err)
		}
		*kv = b
	}
	if _, err := (*kv).PutString(ctx, cfg.ID, time.Now().UTC().Format(time.RFC3339Nano)); err != nil {
		// The bucket may be gone (its server lost its store): look it up,
		// or make it, again next time.
		*kv = nil
		return 0, fmt.Errorf("putting key %s: %w", cfg.ID, err)
	}
	lister, err := (*kv).ListKeys(ctx)
	if err != nil {
		*kv = nil
		return 0, fmt.Errorf("listing keys: %w", err)
	}
	n := 0
	for range lister.Keys() {
		n++
	}
	return max(n, 1), nil
}

package queue

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/cenkalti/backoff/v5"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/extractq/extractq/config"
)

// errCodeStreamCreate is the server's "error creating store for stream".
const errCodeStreamCreate jetstream.ErrorCode = 10049

// maxBackOff caps one step of the consumer's redelivery schedule, unless
// the ack wait itself is longer.
const maxBackOff = 15 * time.Minute

// EnsureStream creates the runs stream, or updates it to this
// configuration: work-queue retention (a message is removed once acked),
// subjects cfg.RunsWildcard(), dedup window cfg.DuplicateWindow, file
// storage, cfg.Replicas copies. It is idempotent. An existing stream whose
// retention or storage differ cannot be updated and returns the server's
// error.
//
// An existing stream with another replica count is updated to
// cfg.Replicas: a JetStream cluster adds or removes copies in place,
// keeping the messages (tested from 1 to 3 on nats-server 2.9 and on the
// module of go.mod). Replicas above 1 on a server that is not in a
// cluster, or above the cluster's size, is an error naming nats.replicas
// and what the server said.
//
// A failure of the server to create the stream's store (error code 10049)
// is retried a few times: nats-server 2.9 can lose a race between creating
// one stream and deleting an account's last one.
func EnsureStream(ctx context.Context, js jetstream.JetStream, cfg config.NATS) (jetstream.Stream, error) {
	bo := backoff.NewExponentialBackOff()
	bo.InitialInterval = 50 * time.Millisecond
	bo.MaxInterval = time.Second
	s, err := backoff.Retry(ctx, func() (jetstream.Stream, error) {
		s, err := js.CreateOrUpdateStream(ctx, StreamConfig(cfg))
		var apiErr *jetstream.APIError
		if err != nil && !(errors.As(err, &apiErr) && apiErr.ErrorCode == errCodeStreamCreate) {
			return nil, backoff.Permanent(err)
		}
		return s, err
	}, backoff.WithBackOff(bo), backoff.WithMaxTries(5), backoff.WithMaxElapsedTime(0))
	if err != nil {
		var apiErr *jetstream.APIError
		if cfg.Replicas > 1 && errors.As(err, &apiErr) && replicaErrors[apiErr.ErrorCode] {
			return nil, fmt.Errorf("queue.EnsureStream(%q): nats.replicas is %d, more copies than this JetStream can place (a server not in a cluster keeps 1, a cluster at most one per server): %w",
				cfg.Stream, cfg.Replicas, err)
		}
		return nil, fmt.Errorf("queue.EnsureStream(%q): %w", cfg.Stream, err)
	}
	return s, nil
}

// replicaErrors are the server's errors for a replica count it cannot
// place: JSStreamReplicasNotSupportedErr (10074, not clustered) and
// JSInsufficientResourcesErr (10023) or JSClusterNoPeersErrF (10005),
// too few servers (nats-server's server/errors.json).
var replicaErrors = map[jetstream.ErrorCode]bool{10074: true, 10023: true, 10005: true}

// StreamConfig returns the runs stream's configuration, as EnsureStream
// applies it.
func StreamConfig(cfg config.NATS) jetstream.StreamConfig {
	return jetstream.StreamConfig{
		Name:        cfg.Stream,
		Description: "extractq runs: one message per (message, run)",
		Subjects:    []string{cfg.RunsWildcard()},
		Retention:   jetstream.WorkQueuePolicy,
		Storage:     jetstream.FileStorage,
		// Never drop a stored run: when the limits are reached, refuse new
		// publishes (IsStreamFull) and let the publisher wait.
		Discard:    jetstream.DiscardNew,
		Duplicates: cfg.DuplicateWindow,
		MaxMsgs:    limitOrUnbounded(cfg.MaxMsgs),
		MaxBytes:   limitOrUnbounded(cfg.MaxBytes),
		Replicas:   max(cfg.Replicas, 1),
		// Direct get: any server holding a copy answers reads of one
		// message ($JS.API.DIRECT.GET), which `nats stream view` and
		// `nats stream get` use. Without it the CLI reads through an
		// ephemeral consumer, which a work-queue stream refuses beside the
		// workers' (error 10100). nats-server 2.9 has it, and it can be
		// turned on for an existing stream.
		AllowDirect: true,
	}
}

func limitOrUnbounded(n int64) int64 {
	if n <= 0 {
		return -1
	}
	return n
}

// IsStreamFull reports whether a publish was refused because the stream is
// at its MaxMsgs or MaxBytes limit (discard new). Nothing was stored; the
// publish may be retried once workers have drained the stream.
func IsStreamFull(err error) bool {
	if err == nil {
		return false
	}
	var apiErr *jetstream.APIError
	if errors.As(err, &apiErr) && apiErr.ErrorCode == errCodeStreamStoreFailed {
		return true
	}
	msg := strings.ToLower(err.Error())
	return strings.Contains(msg, "maximum messages exceeded") || strings.Contains(msg, "maximum bytes exceeded")
}

// errCodeStreamStoreFailed is the server's error for a message refused by
// the stream's limits (JSStreamStoreFailedF).
const errCodeStreamStoreFailed jetstream.ErrorCode = 10077

// EnsureConsumer creates the durable pull consumer cfg.Consumer on the runs
// stream, filtered to every run (nats.consumers shared), or updates it to
// this configuration (see ConsumerConfig). The stream must exist
// (jetstream.ErrStreamNotFound otherwise). It is idempotent. Workers use
// EnsureConsumers, which knows both modes.
func EnsureConsumer(ctx context.Context, js jetstream.JetStream, cfg config.NATS, w config.Worker) (jetstream.Consumer, error) {
	c, err := js.CreateOrUpdateConsumer(ctx, cfg.Stream, ConsumerConfig(cfg, w))
	if err != nil {
		return nil, fmt.Errorf("queue.EnsureConsumer(%q, %q): %w", cfg.Stream, cfg.Consumer, err)
	}
	return c, nil
}

// ConsumerConfig returns the shared consumer's configuration
// (ConsumerConfigOf cfg.SharedConsumer()).
func ConsumerConfig(cfg config.NATS, w config.Worker) jetstream.ConsumerConfig {
	return ConsumerConfigOf(cfg.SharedConsumer(), w)
}

// ConsumerConfigOf returns the configuration of the workers' consumer
// spec: durable pull, explicit ack, filter spec.Filter, MaxDeliver
// w.MaxDeliver, and a growing redelivery schedule BackOff (see
// BackOffSchedule) whose first step is w.AckWait. AckWait is set equal to
// BackOff[0], as the server requires (nats-server 2.9 silently replaces
// any other AckWait with it).
//
// MaxAckPending, which bounds the messages out for ack across every worker
// sharing the consumer, is max(1000, 2*w.Concurrency): each worker bounds
// its own in-flight work (see Run), so this is only a fleet-wide ceiling.
func ConsumerConfigOf(spec config.ConsumerSpec, w config.Worker) jetstream.ConsumerConfig {
	bo := BackOffSchedule(w.AckWait, w.MaxDeliver)
	desc := "extractq workers"
	if spec.SchemaID != "" {
		desc += " of schema " + spec.SchemaID
	}
	return jetstream.ConsumerConfig{
		Durable:       spec.Name,
		Description:   desc,
		DeliverPolicy: jetstream.DeliverAllPolicy,
		AckPolicy:     jetstream.AckExplicitPolicy,
		AckWait:       bo[0],
		MaxDeliver:    w.MaxDeliver,
		BackOff:       bo,
		FilterSubject: spec.Filter,
		ReplayPolicy:  jetstream.ReplayInstantPolicy,
		MaxAckPending: max(1000, 2*w.Concurrency),
	}
}

// BackOffSchedule returns the ack wait of each delivery but the last:
// ackWait, then doubling, each step at most max(ackWait, 15m). Its length is
// maxDeliver-1 (at least 1), as the server requires fewer steps than
// deliveries. A message not acked (nor kept alive with in-progress) within
// its step is redelivered, so a message whose worker died is retried more
// and more slowly. An explicit nak with a delay overrides the step.
func BackOffSchedule(ackWait time.Duration, maxDeliver int) []time.Duration {
	if ackWait <= 0 {
		ackWait = 30 * time.Second
	}
	limit := max(ackWait, maxBackOff)
	bo := make([]time.Duration, max(1, maxDeliver-1))
	bo[0] = ackWait
	for i := 1; i < len(bo); i++ {
		bo[i] = min(2*bo[i-1], limit)
	}
	return bo
}

// Pending returns the consumer's backlog: messages not yet delivered
// (NumPending) plus messages delivered and not yet acked (NumAckPending).
// It asks the server each time, for progress display and autoscaling.
func Pending(ctx context.Context, cons jetstream.Consumer) (uint64, error) {
	info, err := cons.Info(ctx)
	if err != nil {
		return 0, fmt.Errorf("queue.Pending: %w", err)
	}
	return info.NumPending + uint64(max(0, info.NumAckPending)), nil
}

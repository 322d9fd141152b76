package queue

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/zap"

	"github.com/extractq/extractq/config"
)

// MaxDeliveriesSubject is the subject of the server's advisory for a
// message of the stream's shared consumer (nats.consumer) that reached its
// delivery limit.
func MaxDeliveriesSubject(cfg config.NATS) string {
	return MaxDeliveriesSubjectOf(cfg, cfg.Consumer)
}

// MaxDeliveriesSubjectOf is the subject of the server's advisory for a
// message of the stream's consumer named consumer that reached its
// delivery limit: "$JS.EVENT.ADVISORY.CONSUMER.MAX_DELIVERIES.<stream>.<consumer>".
func MaxDeliveriesSubjectOf(cfg config.NATS, consumer string) string {
	return "$JS.EVENT.ADVISORY.CONSUMER.MAX_DELIVERIES." + cfg.Stream + "." + consumer
}

// DeadLetterStreamName is the stream that keeps the max-deliveries
// advisories of the runs stream: "<stream>_DEAD".
func DeadLetterStreamName(cfg config.NATS) string { return cfg.Stream + "_DEAD" }

// EnsureDeadLetter creates the stream capturing the max-deliveries
// advisories of the workers' consumers, and its durable consumer, so a run
// whose every delivery crashed its worker is found even when no worker was
// up when the server gave up on it. consumers are the workers' consumers
// (config.Config.Consumers: one subject each); none means the shared
// consumer, nats.consumer. An existing stream's subjects are updated to
// them (a switch of nats.consumers); advisories it holds are kept. One
// durable consumer, "<consumer>_dead", reads the advisories of every
// pool, so any worker records any schema's. The stream has cfg.Replicas
// copies, as the runs stream has.
func EnsureDeadLetter(ctx context.Context, js jetstream.JetStream, cfg config.NATS, consumers ...config.ConsumerSpec) (jetstream.Consumer, error) {
	name := DeadLetterStreamName(cfg)
	subjects := []string{MaxDeliveriesSubject(cfg)}
	if len(consumers) > 0 {
		subjects = subjects[:0]
		for _, c := range consumers {
			subjects = append(subjects, MaxDeliveriesSubjectOf(cfg, c.Name))
		}
	}
	_, err := js.CreateOrUpdateStream(ctx, jetstream.StreamConfig{
		Name:        name,
		Description: "max-deliveries advisories of " + cfg.Stream + " (runs that ran out of deliveries)",
		Subjects:    subjects,
		Retention:   jetstream.WorkQueuePolicy,
		Storage:     jetstream.FileStorage,
		Discard:     jetstream.DiscardNew,
		Replicas:    max(cfg.Replicas, 1),
	})
	if err != nil {
		return nil, fmt.Errorf("queue.EnsureDeadLetter(%q): %w", name, err)
	}
	c, err := js.CreateOrUpdateConsumer(ctx, name, jetstream.ConsumerConfig{
		Durable:   cfg.Consumer + "_dead",
		AckPolicy: jetstream.AckExplicitPolicy,
		AckWait:   time.Minute,
	})
	if err != nil {
		return nil, fmt.Errorf("queue.EnsureDeadLetter(%q): consumer: %w", name, err)
	}
	return c, nil
}

// maxDeliveriesAdvisory is the server's io.nats.jetstream.advisory.v1.max_deliver.
type maxDeliveriesAdvisory struct {
	Stream     string `json:"stream"`
	Consumer   string `json:"consumer"`
	StreamSeq  uint64 `json:"stream_seq"`
	Deliveries uint64 `json:"deliveries"`
}

// DeadLetterHandler records a run that ran out of deliveries. It returns
// nil when the run is recorded (or needs nothing), so the run message can
// be removed from the stream.
type DeadLetterHandler func(ctx context.Context, env Envelope, deliveries uint64) error

// RunDeadLetter consumes the max-deliveries advisories until ctx is done.
// For each, it reads the run message still held by the runs stream, calls
// h, and on success deletes the run message and acks the advisory. A run
// message already gone (acked meanwhile) just acks the advisory.
func RunDeadLetter(ctx context.Context, js jetstream.JetStream, cfg config.NATS, dead jetstream.Consumer, h DeadLetterHandler, log *zap.Logger) {
	if log == nil {
		log = zap.NewNop()
	}
	log = log.Named("dead_letter")
	for ctx.Err() == nil {
		deadLetterFetch(ctx, js, cfg, dead, h, log)
	}
}

// deadLetterFetch waits up to 5s for advisories and handles them. The wait
// ends with ctx, so a worker told to stop does not sit out the fetch.
func deadLetterFetch(ctx context.Context, js jetstream.JetStream, cfg config.NATS, dead jetstream.Consumer, h DeadLetterHandler, log *zap.Logger) {
	fctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	batch, err := dead.Fetch(16, jetstream.FetchContext(fctx))
	if err != nil {
		if ctx.Err() == nil {
			log.Warn("fetching advisories failed", zap.Error(err))
			sleep(ctx, 2*time.Second)
		}
		return
	}
	for msg := range batch.Messages() {
		if err := handleAdvisory(ctx, js, cfg, msg.Data(), h, log); err != nil {
			log.Warn("max-deliveries advisory not handled; will retry", zap.Error(err))
			_ = msg.NakWithDelay(5 * time.Second)
			continue
		}
		_ = msg.Ack()
	}
}

func handleAdvisory(ctx context.Context, js jetstream.JetStream, cfg config.NATS, data []byte, h DeadLetterHandler, log *zap.Logger) error {
	var adv maxDeliveriesAdvisory
	if err := json.Unmarshal(data, &adv); err != nil || adv.StreamSeq == 0 {
		log.Error("malformed max-deliveries advisory; dropping it")
		return nil
	}
	stream, err := js.Stream(ctx, cfg.Stream)
	if err != nil {
		return err
	}
	raw, err := stream.GetMsg(ctx, adv.StreamSeq)
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return nil // acked or removed meanwhile
	}
	if err != nil {
		return err
	}
	env, err := decodeEnvelope(raw.Data)
	if err != nil {
		log.Error("run message past its delivery limit is not an envelope; removing it", zap.Uint64("stream_seq", adv.StreamSeq), zap.Error(err))
	} else {
		log.Warn("run reached its delivery limit", zap.Int64("message_id", env.MessageID), zap.Int("run_no", env.RunNo),
			zap.Uint64("deliveries", adv.Deliveries))
		if err := h(ctx, env, adv.Deliveries); err != nil {
			return err
		}
	}
	if err := stream.DeleteMsg(ctx, adv.StreamSeq); err != nil && !errors.Is(err, jetstream.ErrMsgNotFound) {
		return err
	}
	return nil
}

func sleep(ctx context.Context, d time.Duration) {
	select {
	case <-ctx.Done():
	case <-time.After(d):
	}
}

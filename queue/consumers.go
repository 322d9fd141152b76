package queue

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/extractq/extractq/config"
)

// errCodeConsumerNotUnique is the server's JSConsumerWQConsumerNotUniqueErr
// (nats-server's server/errors.json): a work-queue stream refuses a
// consumer whose filter overlaps another consumer's.
const errCodeConsumerNotUnique jetstream.ErrorCode = 10100

// ModeSwitchError is EnsureConsumers' error for a consumer of the other
// nats.consumers mode that cannot be deleted yet: a worker still holds
// runs it delivered, or still pulls from it.
type ModeSwitchError struct {
	Stream   string
	Consumer string // the other mode's consumer
	Filter   string // its filter subject
	// Mode is the configured nats.consumers; the consumer is of the other.
	Mode string
	// AckPending counts its runs delivered and not yet acked; Waiting its
	// pull requests waiting (workers reading it).
	AckPending int
	Waiting    int
}

func (e *ModeSwitchError) Error() string {
	other := config.ConsumersShared
	if e.Mode == config.ConsumersShared {
		other = config.ConsumersPerSchema
	}
	return fmt.Sprintf("nats.consumers is %s, but stream %s still has consumer %s of nats.consumers %s (filter %s) "+
		"with %d runs in flight and %d pull requests waiting: its workers are still running, and a work-queue stream "+
		"cannot have both modes' consumers (their filters overlap). Stop the workers that read %s (scale their "+
		"Deployment to 0 and delete its ScaledObject); once they are gone this worker deletes the consumer as it "+
		"starts. The runs it has not delivered stay on the stream and go to the %s consumers. To remove it at once "+
		"(its runs in flight are delivered again to the new consumers): nats consumer rm %s %s",
		e.Mode, e.Stream, e.Consumer, other, e.Filter, e.AckPending, e.Waiting, e.Consumer, e.Mode, e.Stream, e.Consumer)
}

// EnsureConsumers creates or updates every consumer of the workers in
// cfg's nats.consumers mode (config.Config.Consumers: the shared one, or
// one per schema) on the runs stream, with ConsumerConfigOf each, and
// returns the handles of those this worker reads
// (config.Config.WorkerConsumers), in that order. Every consumer of the
// mode is made, not only this worker's, so that each pool's consumer (and
// its backlog, which the autoscaler reads) exists as soon as any worker
// ran. The stream must exist. It is idempotent.
//
// Switching modes: a work-queue stream refuses consumers whose filters
// overlap (error 10100), so a consumer of the other mode (nats.consumer
// when per_schema is configured, "<consumer>-<schema id>" of a configured
// schema when shared is) is deleted first, but only while it is idle:
// none of its runs in flight (NumAckPending 0) and no pull request waiting
// on it (NumWaiting 0, none of its workers running). Deleting it loses
// nothing: a work-queue stream keeps every run until it is acked, and the
// new mode's consumers, which deliver from the stream's start, deliver
// the runs it had not. While it is not idle, EnsureConsumers returns a
// *ModeSwitchError saying what to stop, and what to run to delete it
// anyway; a worker's start-up retries it (cmdconfig.RetryStartup) while
// the old workers stop. Any other overlapping consumer is an error naming
// it.
func EnsureConsumers(ctx context.Context, js jetstream.JetStream, cfg *config.Config) ([]jetstream.Consumer, error) {
	n := cfg.NATS
	if err := removeOtherMode(ctx, js, cfg); err != nil {
		return nil, err
	}
	made := map[string]jetstream.Consumer{}
	for _, spec := range cfg.Consumers() {
		c, err := js.CreateOrUpdateConsumer(ctx, n.Stream, ConsumerConfigOf(spec, cfg.Worker))
		if err != nil {
			var apiErr *jetstream.APIError
			if errors.As(err, &apiErr) && apiErr.ErrorCode == errCodeConsumerNotUnique {
				return nil, fmt.Errorf("queue.EnsureConsumers(%q, %q): another consumer of the stream has a filter overlapping %s "+
					"(a work-queue stream allows one consumer per subject; list them with: nats consumer ls %s): %w",
					n.Stream, spec.Name, spec.Filter, n.Stream, err)
			}
			return nil, fmt.Errorf("queue.EnsureConsumers(%q, %q): %w", n.Stream, spec.Name, err)
		}
		made[spec.Name] = c
	}
	var mine []jetstream.Consumer
	for _, spec := range cfg.WorkerConsumers() {
		mine = append(mine, made[spec.Name])
	}
	return mine, nil
}

// otherModeConsumers returns the names of the workers' consumers of the
// mode cfg does not configure.
func otherModeConsumers(cfg *config.Config) []string {
	if cfg.NATS.Consumers == config.ConsumersPerSchema {
		return []string{cfg.NATS.Consumer}
	}
	names := make([]string, len(cfg.Schemas))
	for i, s := range cfg.Schemas {
		names[i] = cfg.NATS.SchemaConsumer(s.ID).Name
	}
	return names
}

// removeOtherMode deletes the other mode's consumers that exist and are
// idle (see EnsureConsumers).
func removeOtherMode(ctx context.Context, js jetstream.JetStream, cfg *config.Config) error {
	n := cfg.NATS
	for _, name := range otherModeConsumers(cfg) {
		if slices.ContainsFunc(cfg.Consumers(), func(s config.ConsumerSpec) bool { return s.Name == name }) {
			continue // a schema id that makes the names alike; the update decides
		}
		c, err := js.Consumer(ctx, n.Stream, name)
		if errors.Is(err, jetstream.ErrConsumerNotFound) {
			continue
		}
		if err != nil {
			return fmt.Errorf("queue.EnsureConsumers(%q): reading consumer %q of the other nats.consumers mode: %w", n.Stream, name, err)
		}
		info := c.CachedInfo()
		if info.NumAckPending > 0 || info.NumWaiting > 0 {
			return &ModeSwitchError{Stream: n.Stream, Consumer: name, Filter: filterOf(info.Config), Mode: n.Consumers,
				AckPending: info.NumAckPending, Waiting: info.NumWaiting}
		}
		if err := js.DeleteConsumer(ctx, n.Stream, name); err != nil && !errors.Is(err, jetstream.ErrConsumerNotFound) {
			return fmt.Errorf("queue.EnsureConsumers(%q): deleting consumer %q of the other nats.consumers mode: %w", n.Stream, name, err)
		}
	}
	return nil
}

// filterOf returns a consumer configuration's filter subjects.
func filterOf(c jetstream.ConsumerConfig) string {
	if c.FilterSubject != "" {
		return c.FilterSubject
	}
	return strings.Join(c.FilterSubjects, ", ")
}

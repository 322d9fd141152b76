package relay

import (
	"context"

	"go.uber.org/zap"

	"github.com/extractq/extractq/queue"
)

// consumerStates are the workers' consumers' states, by the schema each
// serves ("" for the shared consumer, which serves all).
type consumerStates map[string]queue.ConsumerState

// of returns the state of the consumer that serves schemaID's runs; the
// zero state, which gives up on nothing, when it could not be read.
func (c consumerStates) of(schemaID string) queue.ConsumerState {
	if st, ok := c[schemaID]; ok {
		return st
	}
	return c[""]
}

// consumerStates reads the state of each of p.Consumers (the shared
// consumer when none is named). One that cannot be read is logged and
// left out: the runs of its schema are not looked at for GivenUp this
// pass.
func (r *Relay) consumerStates(ctx context.Context, p ReconcileParams) consumerStates {
	states := consumerStates{}
	if len(p.Consumers) == 0 {
		st, err := r.cfg.Lookup.Consumer(ctx)
		if err != nil {
			r.log.Warn("reading the runs consumer failed; not looking for runs it gave up on this pass", zap.Error(err))
			return states
		}
		states[""] = st
		return states
	}
	for _, c := range p.Consumers {
		st, err := r.cfg.Lookup.ConsumerNamed(ctx, c.Name)
		if err != nil {
			r.log.Warn("reading a runs consumer failed; not looking for runs it gave up on this pass",
				zap.String("consumer", c.Name), zap.Error(err))
			continue
		}
		states[c.SchemaID] = st
	}
	return states
}

// consumerMissing returns an error wrapping jetstream.ErrConsumerNotFound
// when one of p.Consumers (the shared consumer when none is named) does
// not exist; nil otherwise, a failure to read one included.
func (r *Relay) consumerMissing(ctx context.Context, p ReconcileParams) error {
	names := []string{""}
	if len(p.Consumers) > 0 {
		names = names[:0]
		for _, c := range p.Consumers {
			names = append(names, c.Name)
		}
	}
	for _, name := range names {
		var err error
		if name == "" {
			_, err = r.cfg.Lookup.Consumer(ctx)
		} else {
			_, err = r.cfg.Lookup.ConsumerNamed(ctx, name)
		}
		if queue.IsConsumerNotFound(err) {
			return err // it names the consumer
		}
	}
	return nil
}

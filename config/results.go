package config

import (
	"cmp"
	"fmt"
	"time"
)

// Results configures the results stream (docs/results-stream.md): events
// on JetStream for every change a downstream system must know, published
// by the worker's results relay from an outbox written in the
// transaction of each change.
type Results struct {
	// Enabled turns the outbox's writes and the relay on. Default false:
	// the stream copies every record (customer values) into JetStream for
	// as long as MaxAge, which a deployment should choose to do, and a
	// stream nobody reads only fills. The worker writes it into Postgres
	// at start, and every command writing a change reads it there.
	Enabled bool `yaml:"enabled"`
	// Stream is the results stream's name. Default NATS.Stream and
	// "_RESULTS". Its subjects are "<nats.subject_prefix>.results.>", its
	// replicas nats.replicas, its dedup window nats.duplicate_window.
	Stream string `yaml:"stream"`
	// MaxAge is how long the stream keeps an event (limits retention),
	// and how long the outbox keeps a published row (for the stream to be
	// filled again if it loses its store). Default 168h (7 days).
	MaxAge time.Duration `yaml:"max_age"`
	// MaxBytes bounds the stream's size; 0 means unbounded. When full,
	// the oldest events are discarded (limits retention).
	MaxBytes int64 `yaml:"max_bytes"`
	// IncludeText adds the message's text to each message's event. Default
	// false: events carry ids and records, never the customer's text.
	IncludeText bool `yaml:"include_text"`
	// PublishEvery is how often the relay looks for rows to publish when
	// no commit of its own process woke it. Default 500ms.
	PublishEvery time.Duration `yaml:"publish_every"`
}

// StreamName returns the results stream's name: Stream, or n.Stream and
// "_RESULTS" (worked out when used, so a test that names its runs stream
// gets its own results stream too).
func (r Results) StreamName(n NATS) string { return cmp.Or(r.Stream, n.Stream+"_RESULTS") }

// withDefaults fills r's zero fields.
func (r Results) withDefaults() Results {
	r.MaxAge = cmp.Or(r.MaxAge, 168*time.Hour)
	r.PublishEvery = cmp.Or(r.PublishEvery, 500*time.Millisecond)
	return r
}

// validate names the first bad field of r.
func (r Results) validate(n NATS) error {
	switch {
	case r.StreamName(n) == n.Stream:
		return fmt.Errorf("results.stream: %q is the runs stream's name (nats.stream)", r.Stream)
	case r.MaxAge <= 0:
		return fmt.Errorf("results.max_age: %v is not a positive duration", r.MaxAge)
	case r.MaxBytes < 0:
		return fmt.Errorf("results.max_bytes: %d is negative", r.MaxBytes)
	case r.PublishEvery <= 0:
		return fmt.Errorf("results.publish_every: %v is not a positive duration", r.PublishEvery)
	}
	return nil
}

// ResultsSubject returns the subject of the events of the message whose
// key (a subject-safe encoding of its id) is key, of schema schemaID:
// "<prefix>.results.<schema id>.<key>".
func (n NATS) ResultsSubject(schemaID, key string) string {
	return n.SubjectPrefix + ".results." + schemaID + "." + key
}

// ResultsMessageFilter returns the subject filter of every event of the
// message whose key is key, whatever its schema.
func (n NATS) ResultsMessageFilter(key string) string {
	return n.SubjectPrefix + ".results.*." + key
}

// BatchDoneSubject returns the subject of batch.done events:
// "<prefix>.results.batch.done".
func (n NATS) BatchDoneSubject() string { return n.SubjectPrefix + ".results.batch.done" }

// ResultsWildcard returns the results stream's subjects.
func (n NATS) ResultsWildcard() string { return n.SubjectPrefix + ".results.>" }

package queue

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/extractq/extractq/config"
)

// ErrNotStored is returned by Lookup.RunAt for a sequence the stream does
// not hold (any more): acked and removed (a work queue keeps nothing once
// acked), purged, or a stream recreated since.
var ErrNotStored = errors.New("queue: no run message at this sequence")

// Lookup reads the runs stream's messages by sequence, with JetStream's
// direct get ($JS.API.DIRECT.GET, which the stream allows, see
// StreamConfig) or, on a stream made without it, the stream API's
// get-message request ($JS.API.STREAM.MSG.GET); nats.go picks by the
// stream's configuration. A direct get may be answered by a copy a few
// operations behind the stream's leader; the reconciler only reads runs
// older than its grace. It is safe for concurrent use.
type Lookup struct {
	js  jetstream.JetStream
	cfg config.NATS

	mu     sync.Mutex
	stream jetstream.Stream // once found
}

// NewLookup returns a Lookup of cfg.Stream.
func NewLookup(js jetstream.JetStream, cfg config.NATS) *Lookup {
	return &Lookup{js: js, cfg: cfg}
}

// Bounds returns the stream's first and last sequence now. A stream that
// holds nothing has first = last+1 (after a purge, last is the purged
// stream's last sequence).
func (l *Lookup) Bounds(ctx context.Context) (first, last uint64, err error) {
	s, err := l.handle(ctx)
	if err != nil {
		return 0, 0, fmt.Errorf("queue.Lookup.Bounds(%q): %w", l.cfg.Stream, err)
	}
	info, err := s.Info(ctx)
	if err != nil {
		return 0, 0, fmt.Errorf("queue.Lookup.Bounds(%q): %w", l.cfg.Stream, err)
	}
	return info.State.FirstSeq, info.State.LastSeq, nil
}

// handle returns the stream's handle, asking the server the first time.
// Requests through it name the stream, so it outlives a stream recreated.
func (l *Lookup) handle(ctx context.Context) (jetstream.Stream, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.stream != nil {
		return l.stream, nil
	}
	s, err := l.js.Stream(ctx, l.cfg.Stream)
	if err != nil {
		return nil, err
	}
	l.stream = s
	return s, nil
}

// ConsumerState is what the runs consumer (cfg.Consumer) says of the
// messages it delivered.
type ConsumerState struct {
	// Delivered is the highest stream sequence it delivered.
	Delivered uint64
	// AckPending counts the messages it delivered that are neither acked
	// nor given up: in flight, or waiting to be delivered again. A message
	// that reached MaxDeliver is not counted once the server, about to
	// deliver it again to a waiting pull request, gives up on it
	// (nats-server 2.9.10 and 2.15.2 alike): it stays on a work-queue
	// stream, never delivered again.
	AckPending int
	// MaxDeliver is the consumer's delivery limit.
	MaxDeliver int
}

// GivenUp reports whether the consumer gave up on the message at seq, a
// message the stream still holds: it delivered it, and holds no delivered
// message pending, so that one reached its delivery limit. When messages
// are pending it cannot tell, and reports false.
func (c ConsumerState) GivenUp(seq uint64) bool {
	return seq > 0 && seq <= c.Delivered && c.AckPending == 0
}

// Consumer reads the shared runs consumer's state now (ConsumerNamed
// cfg.Consumer).
func (l *Lookup) Consumer(ctx context.Context) (ConsumerState, error) {
	return l.ConsumerNamed(ctx, l.cfg.Consumer)
}

// ConsumerNamed reads the state of the stream's consumer name now. A
// consumer that does not exist returns an error wrapping
// jetstream.ErrConsumerNotFound.
func (l *Lookup) ConsumerNamed(ctx context.Context, name string) (ConsumerState, error) {
	c, err := l.js.Consumer(ctx, l.cfg.Stream, name)
	if err != nil {
		return ConsumerState{}, fmt.Errorf("queue.Lookup.Consumer(%q, %q): %w", l.cfg.Stream, name, err)
	}
	info, err := c.Info(ctx)
	if err != nil {
		return ConsumerState{}, fmt.Errorf("queue.Lookup.Consumer(%q, %q): %w", l.cfg.Stream, name, err)
	}
	return ConsumerState{Delivered: info.Delivered.Stream, AckPending: info.NumAckPending, MaxDeliver: info.Config.MaxDeliver}, nil
}

// Remove deletes the message at seq from the stream; one already gone is
// no error.
func (l *Lookup) Remove(ctx context.Context, seq uint64) error {
	s, err := l.handle(ctx)
	if err == nil {
		err = s.DeleteMsg(ctx, seq)
	}
	if err != nil && !errors.Is(err, jetstream.ErrMsgNotFound) {
		return fmt.Errorf("queue.Lookup.Remove(%q, %d): %w", l.cfg.Stream, seq, err)
	}
	return nil
}

// StoredRun is one run message read from the stream.
type StoredRun struct {
	Seq      uint64
	Envelope Envelope
	// MsgID is its Nats-Msg-Id: the run's dedup id, with a suffix for a
	// requeued copy ("@<sequence>") or a reconciler's republish (".r<n>").
	MsgID string
}

// Of reports whether the message is a copy of the run whose dedup id is
// dedupID: its Nats-Msg-Id is dedupID or starts with dedupID and "@" or
// ".r".
func (s StoredRun) Of(dedupID string) bool {
	rest, ok := strings.CutPrefix(s.MsgID, dedupID)
	return ok && (rest == "" || strings.HasPrefix(rest, "@") || strings.HasPrefix(rest, ".r"))
}

// RunAt returns the run message stored at seq, or an error wrapping
// ErrNotStored. A message whose body is not an envelope is returned with
// a zero Envelope.
func (l *Lookup) RunAt(ctx context.Context, seq uint64) (StoredRun, error) {
	s, err := l.handle(ctx)
	if err != nil {
		return StoredRun{}, fmt.Errorf("queue.Lookup.RunAt(%q, %d): %w", l.cfg.Stream, seq, err)
	}
	m, err := s.GetMsg(ctx, seq)
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return StoredRun{}, fmt.Errorf("queue.Lookup.RunAt(%q, %d): %w", l.cfg.Stream, seq, ErrNotStored)
	}
	if err != nil {
		return StoredRun{}, fmt.Errorf("queue.Lookup.RunAt(%q, %d): %w", l.cfg.Stream, seq, err)
	}
	sr := StoredRun{Seq: m.Sequence, MsgID: m.Header.Get(jetstream.MsgIDHeader)}
	if env, err := decodeEnvelope(m.Data); err == nil {
		sr.Envelope = env
	}
	return sr, nil
}

// Lookup returns a Lookup of the stream p publishes on.
func (p *Publisher) Lookup() *Lookup { return NewLookup(p.js, p.cfg) }

// IsStreamNotFound reports whether err says the stream does not exist (it
// was deleted, or the server lost its store).
func IsStreamNotFound(err error) bool { return errors.Is(err, jetstream.ErrStreamNotFound) }

// IsConsumerNotFound reports whether err says the consumer does not exist.
func IsConsumerNotFound(err error) bool { return errors.Is(err, jetstream.ErrConsumerNotFound) }

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

// Lookup reads the runs stream's messages by sequence, with the stream
// API's get-message request (JetStream's $JS.API.STREAM.MSG.GET, which
// nats-server 2.9 serves without direct get). It is safe for concurrent
// use.
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

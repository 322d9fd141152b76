package queue

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/extractq/extractq/config"
)

// ResultsStreamConfig returns the results stream's configuration
// (docs/results-stream.md): limits retention (events stay for consumers
// until r.MaxAge or r.MaxBytes, oldest discarded first), subjects
// n.ResultsWildcard(), n.Replicas copies, n.DuplicateWindow dedup.
func ResultsStreamConfig(n config.NATS, r config.Results) jetstream.StreamConfig {
	return jetstream.StreamConfig{
		Name:        r.StreamName(n),
		Description: "extractq results: one event per change of a message's outcome",
		Subjects:    []string{n.ResultsWildcard()},
		Retention:   jetstream.LimitsPolicy,
		Storage:     jetstream.FileStorage,
		Discard:     jetstream.DiscardOld,
		Duplicates:  n.DuplicateWindow,
		MaxAge:      r.MaxAge,
		MaxBytes:    limitOrUnbounded(r.MaxBytes),
		MaxMsgs:     -1,
		Replicas:    max(n.Replicas, 1),
	}
}

// ResultsStream publishes on the results stream. It is safe for
// concurrent use.
type ResultsStream struct {
	js  jetstream.JetStream
	cfg jetstream.StreamConfig
	// AttemptTimeout bounds one publish when ctx has no earlier deadline.
	// Default 5s.
	AttemptTimeout time.Duration
}

// NewResultsStream returns a ResultsStream for n and r.
func NewResultsStream(js jetstream.JetStream, n config.NATS, r config.Results) *ResultsStream {
	return &ResultsStream{js: js, cfg: ResultsStreamConfig(n, r), AttemptTimeout: 5 * time.Second}
}

// Name is the stream's name.
func (s *ResultsStream) Name() string { return s.cfg.Name }

// Ensure creates the stream, or updates it to its configuration, and
// returns its creation time (a stream made again has a new one).
func (s *ResultsStream) Ensure(ctx context.Context) (time.Time, error) {
	st, err := s.js.CreateOrUpdateStream(ctx, s.cfg)
	if err != nil {
		return time.Time{}, fmt.Errorf("queue.ResultsStream.Ensure(%q): %w", s.cfg.Name, err)
	}
	return st.CachedInfo().Created, nil
}

// Info returns the stream's creation time and last sequence; an error
// matching IsStreamNotFound when there is no stream.
func (s *ResultsStream) Info(ctx context.Context) (created time.Time, last uint64, err error) {
	st, err := s.js.Stream(ctx, s.cfg.Name)
	if err != nil {
		return time.Time{}, 0, err
	}
	info := st.CachedInfo()
	return info.Created, info.State.LastSeq, nil
}

// Publish publishes data on subject with Nats-Msg-Id msgID, expecting the
// results stream, and returns the sequence of the stored copy; duplicate
// when the stream held one under msgID already (within its dedup window;
// seq is then that copy's).
func (s *ResultsStream) Publish(ctx context.Context, subject, msgID string, data []byte) (seq uint64, duplicate bool, err error) {
	if msgID == "" {
		return 0, false, errors.New("queue.ResultsStream.Publish: empty message id")
	}
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, s.AttemptTimeout)
		defer cancel()
	}
	msg := &nats.Msg{Subject: subject, Data: data, Header: nats.Header{}}
	msg.Header.Set(jetstream.MsgIDHeader, msgID)
	ack, err := s.js.PublishMsg(ctx, msg, jetstream.WithExpectStream(s.cfg.Name))
	if err != nil {
		return 0, false, fmt.Errorf("queue.ResultsStream.Publish(%s): %w", subject, err)
	}
	return ack.Sequence, ack.Duplicate, nil
}

// PurgeBefore removes the messages on subjects matching filter whose
// sequence is below seq (JetStream purge with a filter subject and a
// sequence).
func (s *ResultsStream) PurgeBefore(ctx context.Context, filter string, seq uint64) error {
	st, err := s.js.Stream(ctx, s.cfg.Name)
	if err != nil {
		return fmt.Errorf("queue.ResultsStream.PurgeBefore(%s): %w", filter, err)
	}
	if err := st.Purge(ctx, jetstream.WithPurgeSubject(filter), jetstream.WithPurgeSequence(seq)); err != nil {
		return fmt.Errorf("queue.ResultsStream.PurgeBefore(%s, %d): %w", filter, seq, err)
	}
	return nil
}

// ResultMsg is one event for PublishMany.
type ResultMsg struct {
	Subject, MsgID string
	Data           []byte
}

// ResultStored is where PublishMany stored one ResultMsg, or why not.
type ResultStored struct {
	Seq       uint64
	Duplicate bool
	Err       error
}

// maxResultsPending bounds PublishMany's publishes awaiting their
// acknowledgement.
const maxResultsPending = 256

// PublishMany publishes msgs asynchronously, in order (one connection's
// publishes reach the stream in the order sent), at most 256 awaiting
// their acknowledgement, and returns one result per message, in order. A
// message not acknowledged within AttemptTimeout, or refused, gets an
// error (nothing is retried here: the caller publishes it again, under
// the same id). When ctx is done, those not yet acknowledged get ctx's
// error.
func (s *ResultsStream) PublishMany(ctx context.Context, msgs []ResultMsg) []ResultStored {
	out := make([]ResultStored, len(msgs))
	type pending struct {
		i        int
		fut      jetstream.PubAckFuture
		deadline time.Time
	}
	var window []pending
	wait := func(pd pending) {
		timer := time.NewTimer(time.Until(pd.deadline))
		defer timer.Stop()
		select {
		case ack := <-pd.fut.Ok():
			out[pd.i] = ResultStored{Seq: ack.Sequence, Duplicate: ack.Duplicate}
		case err := <-pd.fut.Err():
			out[pd.i].Err = fmt.Errorf("queue.ResultsStream.PublishMany(%s): %w", msgs[pd.i].Subject, err)
		case <-timer.C:
			out[pd.i].Err = fmt.Errorf("queue.ResultsStream.PublishMany(%s): no acknowledgement within %s", msgs[pd.i].Subject, s.AttemptTimeout)
		case <-ctx.Done():
			out[pd.i].Err = fmt.Errorf("queue.ResultsStream.PublishMany(%s): %w", msgs[pd.i].Subject, ctx.Err())
		}
	}
	for i, m := range msgs {
		if m.MsgID == "" {
			out[i].Err = errors.New("queue.ResultsStream.PublishMany: empty message id")
			continue
		}
		for len(window) >= maxResultsPending {
			wait(window[0])
			window = window[1:]
		}
		msg := &nats.Msg{Subject: m.Subject, Data: m.Data, Header: nats.Header{}}
		msg.Header.Set(jetstream.MsgIDHeader, m.MsgID)
		fut, err := s.js.PublishMsgAsync(msg, jetstream.WithExpectStream(s.cfg.Name), jetstream.WithRetryAttempts(0))
		if err != nil {
			out[i].Err = fmt.Errorf("queue.ResultsStream.PublishMany(%s): %w", m.Subject, err)
			continue
		}
		window = append(window, pending{i: i, fut: fut, deadline: time.Now().Add(s.AttemptTimeout)})
	}
	for _, pd := range window {
		wait(pd)
	}
	return out
}

package queue

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/cenkalti/backoff/v5"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/extractq/extractq/config"
)

// Publisher publishes run envelopes on the runs stream with a dedup key and
// waits for the stream's acknowledgement. It is safe for concurrent use.
// Its exported fields may be changed after NewPublisher, before first use.
type Publisher struct {
	js  jetstream.JetStream
	cfg config.NATS

	// MaxRetries is how many times a transient failure (no responders, a
	// timeout) is retried, with exponential backoff. Default 4.
	MaxRetries uint
	// InitialInterval is the first retry's wait. Default 200ms.
	InitialInterval time.Duration
	// MaxInterval caps one retry's wait. Default 3s.
	MaxInterval time.Duration
	// AttemptTimeout bounds one publish attempt when ctx has no earlier
	// deadline. Default 5s.
	AttemptTimeout time.Duration
	// MaxPending bounds the asynchronous publishes PublishBatch has
	// waiting for their acknowledgement. Default 256.
	MaxPending int
}

// NewPublisher returns a Publisher for the stream and subjects of cfg.
func NewPublisher(js jetstream.JetStream, cfg config.NATS) *Publisher {
	return &Publisher{
		js:              js,
		cfg:             cfg,
		MaxRetries:      4,
		InitialInterval: 200 * time.Millisecond,
		MaxInterval:     3 * time.Second,
		AttemptTimeout:  5 * time.Second,
		MaxPending:      256,
	}
}

// Stream is the name of the stream p publishes on.
func (p *Publisher) Stream() string { return p.cfg.Stream }

// Reconnecting returns nats.ErrConnectionReconnecting (a retryable
// error, IsRetryable) when p's connection to NATS is lost and being
// re-established, else nil. A publish then goes into nats.go's reconnect
// buffer (nats.ReconnectBufSize, 8 MiB by default) and waits for an
// acknowledgement that can come only after the reconnect: a caller that
// waits out NATS in its own loop (ingest) asks first, and says at once
// that it waits.
func (p *Publisher) Reconnecting() error {
	if nc := p.js.Conn(); nc != nil && nc.IsReconnecting() {
		return fmt.Errorf("queue.Publisher: %w", nats.ErrConnectionReconnecting)
	}
	return nil
}

// Publish publishes env on cfg.RunsSubject(env.SchemaID) with the header
// Nats-Msg-Id set to dedupID, and waits for the stream's acknowledgement.
// It returns duplicate=true when the stream already holds a message with
// dedupID within its dedup window (nothing new is stored).
//
// Transient failures (no stream responded, timeout) are retried up to
// MaxRetries times with backoff; the error of the last attempt is returned,
// or ctx's error when ctx is done first. An invalid envelope or an empty
// dedupID is an error without any publish. When an attempt timed out but
// was stored after all, the retry reports duplicate=true: the run is on the
// stream either way.
func (p *Publisher) Publish(ctx context.Context, dedupID string, env Envelope) (duplicate bool, err error) {
	st, err := p.PublishRun(ctx, dedupID, env)
	return st.Duplicate, err
}

// Stored is the stream's acknowledgement of one run message.
type Stored struct {
	// Seq is the stream sequence of the stored message: the new one, or
	// for a duplicate the one stored earlier with the same dedup id
	// (nats-server answers a duplicate with the first copy's sequence).
	Seq uint64
	// Duplicate: the stream already held a message with this dedup id
	// within its dedup window, and stored nothing new.
	Duplicate bool
	// Retried: an earlier attempt of this publish failed in a way that
	// may have stored it (a timeout, no answer), so a Duplicate may be
	// this publish's own earlier attempt.
	Retried bool
}

// PublishRun is Publish, returning what the stream stored and where.
func (p *Publisher) PublishRun(ctx context.Context, dedupID string, env Envelope) (Stored, error) {
	msg, err := p.message(dedupID, env)
	if err != nil {
		return Stored{}, err
	}
	return p.publish(ctx, dedupID, msg)
}

// publish publishes msg with Publish's retries.
func (p *Publisher) publish(ctx context.Context, dedupID string, msg *nats.Msg) (Stored, error) {
	bo := backoff.NewExponentialBackOff()
	bo.InitialInterval = p.InitialInterval
	bo.MaxInterval = p.MaxInterval
	attempts := 0
	ack, err := backoff.Retry(ctx, func() (*jetstream.PubAck, error) {
		attempts++
		actx, cancel := context.WithTimeout(ctx, p.AttemptTimeout)
		defer cancel()
		ack, err := p.js.PublishMsg(actx, msg,
			jetstream.WithExpectStream(p.cfg.Stream), jetstream.WithRetryAttempts(0))
		if err == nil {
			return ack, nil
		}
		if ctx.Err() != nil || !transient(err) {
			return nil, backoff.Permanent(err)
		}
		return nil, err
	}, backoff.WithBackOff(bo), backoff.WithMaxTries(p.MaxRetries+1), backoff.WithMaxElapsedTime(0))
	if err != nil {
		if nc := p.js.Conn(); nc != nil && !nc.IsConnected() && !errors.Is(err, nats.ErrConnectionReconnecting) {
			// A timeout while the connection is down says only that:
			// name the cause (Explain).
			err = fmt.Errorf("%w: %w", nats.ErrConnectionReconnecting, err)
		}
		return Stored{}, fmt.Errorf("queue.Publish(%q): %w", dedupID, err)
	}
	return Stored{Seq: ack.Sequence, Duplicate: ack.Duplicate, Retried: attempts > 1}, nil
}

// BatchItem is one run to publish with PublishBatch.
type BatchItem struct {
	DedupID  string
	Envelope Envelope
}

// BatchResult is the outcome of one BatchItem: where it was stored (as in
// PublishRun), or the error that kept it from being stored.
type BatchResult struct {
	Stored
	Err error
}

// PublishBatch publishes items asynchronously, at most MaxPending awaiting
// their acknowledgement at a time, and waits for all of them. It returns one
// result per item, in order. An item whose asynchronous publish fails with
// a transient error, or is not acknowledged within AttemptTimeout, is
// published again with Publish (and its retries); the dedup key keeps it
// from being stored twice.
// When ctx is done, items not yet acknowledged get ctx's error.
func (p *Publisher) PublishBatch(ctx context.Context, items []BatchItem) []BatchResult {
	results := make([]BatchResult, len(items))
	type pending struct {
		i        int
		fut      jetstream.PubAckFuture
		deadline time.Time
	}
	var window []pending
	var retry []int

	wait := func(pd pending) {
		timer := time.NewTimer(time.Until(pd.deadline))
		defer timer.Stop()
		select {
		case <-timer.C:
			// No acknowledgement in time: publish again; the dedup key
			// keeps a late first copy from being stored twice.
			retry = append(retry, pd.i)
		case ack := <-pd.fut.Ok():
			results[pd.i].Stored = Stored{Seq: ack.Sequence, Duplicate: ack.Duplicate}
		case err := <-pd.fut.Err():
			if transient(err) {
				retry = append(retry, pd.i)
				return
			}
			results[pd.i].Err = fmt.Errorf("queue.PublishBatch(%q): %w", items[pd.i].DedupID, err)
		case <-ctx.Done():
			results[pd.i].Err = fmt.Errorf("queue.PublishBatch(%q): %w", items[pd.i].DedupID, ctx.Err())
		}
	}

	maxPending := max(1, p.MaxPending)
	for i, it := range items {
		if ctx.Err() != nil {
			results[i].Err = fmt.Errorf("queue.PublishBatch(%q): %w", it.DedupID, ctx.Err())
			continue
		}
		msg, err := p.message(it.DedupID, it.Envelope)
		if err != nil {
			results[i].Err = err
			continue
		}
		for len(window) >= maxPending {
			wait(window[0])
			window = window[1:]
		}
		fut, err := p.js.PublishMsgAsync(msg,
			jetstream.WithExpectStream(p.cfg.Stream), jetstream.WithRetryAttempts(0))
		if err != nil {
			if transient(err) || errors.Is(err, jetstream.ErrTooManyStalledMsgs) {
				retry = append(retry, i)
				continue
			}
			results[i].Err = fmt.Errorf("queue.PublishBatch(%q): %w", it.DedupID, err)
			continue
		}
		window = append(window, pending{i: i, fut: fut, deadline: time.Now().Add(p.AttemptTimeout)})
	}
	for _, pd := range window {
		wait(pd)
	}
	for _, i := range retry {
		results[i].Stored, results[i].Err = p.PublishRun(ctx, items[i].DedupID, items[i].Envelope)
		results[i].Retried = true
	}
	return results
}

// Requeue publishes the copy of d's message that the Requeue decision
// describes and returns its Nats-Msg-Id and where it was stored. A copy
// already stored (a second requeue of the same delivery within the dedup
// window) is not an error. It is the Requeuer Run uses when
// ConsumerOptions.Requeuer is not set.
func (p *Publisher) Requeue(ctx context.Context, d *Delivery) (string, Stored, error) {
	orig := d.msg
	id, _, _ := strings.Cut(orig.Headers().Get(jetstream.MsgIDHeader), "@")
	if id == "" {
		id = d.Envelope.DedupID()
	}
	id += "@" + strconv.FormatUint(d.StreamSeq, 10)
	msg := nats.NewMsg(orig.Subject())
	msg.Data = orig.Data()
	msg.Header.Set(jetstream.MsgIDHeader, id)
	msg.Header.Set(RequeuesHeader, strconv.Itoa(d.Requeues+1))
	msg.Header.Set(RequeueOfHeader, strconv.FormatUint(d.StreamSeq, 10))
	st, err := p.publish(ctx, id, msg)
	return id, st, err
}

// message builds the run message of env.
func (p *Publisher) message(dedupID string, env Envelope) (*nats.Msg, error) {
	if dedupID == "" {
		return nil, errors.New("queue: empty dedup id")
	}
	if err := env.Validate(); err != nil {
		return nil, fmt.Errorf("queue: dedup id %q: %w", dedupID, err)
	}
	body, err := json.Marshal(env)
	if err != nil {
		return nil, fmt.Errorf("queue: dedup id %q: %w", dedupID, err)
	}
	msg := nats.NewMsg(p.cfg.RunsSubject(env.SchemaID))
	msg.Data = body
	msg.Header.Set(jetstream.MsgIDHeader, dedupID)
	return msg, nil
}

// transient reports whether a publish error may succeed when tried again.
func transient(err error) bool {
	return isDuplicateInProcess(err) ||
		errors.Is(err, nats.ErrNoResponders) ||
		errors.Is(err, jetstream.ErrNoStreamResponse) ||
		errors.Is(err, nats.ErrTimeout) ||
		errors.Is(err, jetstream.ErrAsyncPublishTimeout) ||
		errors.Is(err, context.DeadlineExceeded) ||
		errors.Is(err, nats.ErrConnectionReconnecting)
}

// errCodeDuplicateInProcess is the server's JSStreamDuplicateMessageConflict,
// "duplicate message id is in process": a clustered stream still
// replicating an earlier publish under the same Nats-Msg-Id (this
// publish's own first attempt, whose ack was lost in a leader change).
// nats-server's own MQTT bridge retries on it: the retry finds the first
// copy once committed (a duplicate answer with its sequence), or stores
// (server/mqtt.go, server/jetstream_batching.go in nats-server 2.15).
const errCodeDuplicateInProcess jetstream.ErrorCode = 10158

func isDuplicateInProcess(err error) bool {
	var apiErr *jetstream.APIError
	return errors.As(err, &apiErr) && apiErr.ErrorCode == errCodeDuplicateInProcess
}

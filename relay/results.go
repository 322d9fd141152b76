package relay

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"go.uber.org/zap"

	"github.com/extractq/extractq/config"
	"github.com/extractq/extractq/queue"
	"github.com/extractq/extractq/store"
)

// The results relay publishes the results outbox (store, migration
// 000024) on the results stream, in the outbox's id order, one relay at a
// time (store.ResultsOutboxLock), each event under its event id as
// Nats-Msg-Id, asynchronously in order, and records each event's stream
// sequence; a publish that fails leaves its row and the rows after it for
// the next pass. An erased
// event, once stored, purges every earlier event of its message from the
// stream. Its check (Results.Check) publishes every row kept again when
// the stream is not the one the rows went to (its server lost its store,
// or it was deleted), and prunes rows older than the stream keeps events.
// docs/results-stream.md describes the events.

// ResultEvent is the JSON of one event on the results stream
// (docs/results-stream.md). Fields that do not apply to a type are left
// out.
type ResultEvent struct {
	// EventID is random and unique (also across database restores): the
	// consumers' idempotency key, and the Nats-Msg-Id of its publishes.
	EventID string `json:"event_id"`
	// Type is result, held, failed, rejected, retracted, erased or
	// batch.done.
	Type string `json:"type"`
	// Time is when the change was committed in Postgres.
	Time time.Time `json:"time"`
	// MessageID and Source are the message's id and source as ingested;
	// MessageKey is the subject-safe key of its subject (MessageKey).
	MessageID  string `json:"message_id,omitempty"`
	Source     string `json:"source,omitempty"`
	MessageKey string `json:"message_key,omitempty"`
	BatchID    string `json:"batch_id"`
	// RunNo is the run the event is about (for erased, the latest).
	RunNo         int    `json:"run_no,omitempty"`
	SchemaID      string `json:"schema_id"`
	SchemaVersion string `json:"schema_version,omitempty"`
	PromptVersion string `json:"prompt_version,omitempty"`
	Model         string `json:"model,omitempty"`
	// Outcome is succeeded, repaired or approved for a result; for held,
	// how the held record validated (succeeded or repaired).
	Outcome string `json:"outcome,omitempty"`
	// Record is the validated record of a result or held event.
	Record json.RawMessage `json:"record,omitempty"`
	// Text is the message's text, only with results.include_text.
	Text *string `json:"text,omitempty"`
	// Reason and Errors are a failed run's: the kind that failed it and
	// the error list (paths, kinds and messages; no values).
	Reason string          `json:"reason,omitempty"`
	Errors json.RawMessage `json:"errors,omitempty"`
	// DecidedBy is the reviewer of an approval, rejection or retraction;
	// Undone, for a retraction, the decision undone (approved, rejected).
	DecidedBy string `json:"decided_by,omitempty"`
	Undone    string `json:"undone,omitempty"`
	// Summary is a batch.done's: the batch's counts, as GET
	// /v1/batches/{id} answers them (store.BatchSummary).
	Summary json.RawMessage `json:"summary,omitempty"`
}

// MessageKey returns the subject-safe key of the message (source, id):
// the first 16 bytes of SHA-256 of source, a NUL byte and id, in lower
// case hex (32 characters). Ids may hold any UTF-8, including the dots,
// spaces and wildcards subjects cannot.
func MessageKey(source, id string) string {
	h := sha256.Sum256([]byte(source + "\x00" + id))
	return hex.EncodeToString(h[:16])
}

// ResultsConfig configures a Results relay. Store and Stream are required.
type ResultsConfig struct {
	Store  *store.Store
	Stream *queue.ResultsStream
	// NATS names the subjects (SubjectPrefix).
	NATS config.NATS
	// IncludeText adds each message's text to its events.
	IncludeText bool
	// MaxAge is how long published rows are kept (results.max_age); 0
	// keeps them.
	MaxAge time.Duration
	// Metrics, if set, receives the relay's counts (NewResultsMetrics).
	Metrics *ResultsMetrics
	Logger  *zap.Logger
}

// Results publishes the results outbox. It is safe for concurrent use.
type Results struct {
	cfg  ResultsConfig
	log  *zap.Logger
	wake chan struct{}
}

// NewResults returns a Results relay.
func NewResults(cfg ResultsConfig) (*Results, error) {
	if cfg.Store == nil || cfg.Stream == nil {
		return nil, errors.New("relay.NewResults: Store and Stream are required")
	}
	log := cfg.Logger
	if log == nil {
		log = zap.NewNop()
	}
	return &Results{cfg: cfg, log: log.Named("results_relay"), wake: make(chan struct{}, 1)}, nil
}

// Wake asks Run for a publish pass now (after a commit that wrote the
// outbox). It never blocks.
func (r *Results) Wake() {
	select {
	case r.wake <- struct{}{}:
	default:
	}
}

// Event returns the subject and the JSON of outbox row ev.
func (r *Results) Event(ev store.OutboxEvent) (string, []byte, error) {
	e := ResultEvent{EventID: ev.EventID, Type: ev.Type, Time: ev.CreatedAt.UTC(), BatchID: ev.BatchID, RunNo: ev.RunNo,
		SchemaID: ev.SchemaID, SchemaVersion: ev.SchemaVersion, PromptVersion: ev.PromptVersion, Model: ev.Model,
		Outcome: ev.Outcome, Record: ev.Record}
	if len(ev.Detail) > 0 {
		if err := json.Unmarshal(ev.Detail, &e); err != nil {
			return "", nil, fmt.Errorf("outbox row %d: detail: %w", ev.ID, err)
		}
		// Detail never sets the fields above.
		e.EventID, e.Type = ev.EventID, ev.Type
	}
	var subject string
	if ev.Type == store.EventBatchDone {
		subject = r.cfg.NATS.BatchDoneSubject()
	} else {
		e.MessageID, e.Source, e.MessageKey = ev.ExternalID, ev.Source, MessageKey(ev.Source, ev.ExternalID)
		subject = r.cfg.NATS.ResultsSubject(ev.SchemaID, e.MessageKey)
		if r.cfg.IncludeText && ev.Type != store.EventErased {
			e.Text = &ev.Text
		}
	}
	data, err := json.Marshal(e)
	return subject, data, err
}

// Published is what one publish pass did.
type ResultsPublished struct {
	// Events counts the rows published (or found on the stream).
	Events int
	// Busy: another relay holds the outbox; nothing was done.
	Busy bool
	// More: the pass stopped at its limit; rows may be left.
	More bool
}

// publishLimit is the most rows one pass publishes.
const publishLimit = 500

// Publish publishes the outbox's unpublished rows, up to 500, in order,
// and records them. A publish that fails stops the pass: the rows before
// it are recorded, and the error returned.
func (r *Results) Publish(ctx context.Context) (ResultsPublished, error) {
	var res ResultsPublished
	var pubErr error
	err := r.cfg.Store.InTx(ctx, func(tx store.DBTX) error {
		st, err := r.cfg.Store.ResultsOutboxLock(ctx, tx)
		if errors.Is(err, store.ErrOutboxBusy) {
			res.Busy = true
			return nil
		}
		if err != nil {
			return err
		}
		evs, err := r.cfg.Store.ResultsOutboxListUnpublished(ctx, tx, store.ResultsOutboxListParams{Limit: publishLimit, WithText: r.cfg.IncludeText})
		if err != nil || len(evs) == 0 {
			return err
		}
		var created time.Time
		if st.StreamCreated == nil {
			// The first publish: remember which stream the rows go to.
			if created, _, err = r.cfg.Stream.Info(ctx); err != nil {
				created, err = r.cfg.Stream.Ensure(ctx)
			}
			if err != nil {
				return err
			}
			created = created.UTC().Truncate(time.Microsecond)
		}
		done, err := r.publishPage(ctx, evs)
		pubErr = err
		res.Events, res.More = len(done), len(done) == publishLimit
		return r.cfg.Store.ResultsOutboxMarkPublished(ctx, tx, done, created)
	})
	if err != nil {
		r.cfg.Metrics.published(0, true)
		return ResultsPublished{}, fmt.Errorf("relay.Results.Publish: %w", err)
	}
	r.cfg.Metrics.published(res.Events, pubErr != nil)
	if pubErr != nil {
		return res, fmt.Errorf("relay.Results.Publish: %w", pubErr)
	}
	return res, nil
}

// publishPage publishes the events of rows evs asynchronously, in order,
// a stretch at a time: each stretch ends with an erased event, whose
// purge of the message's earlier events follows its publish. It returns
// the rows stored, in order, up to the first that failed, and that
// failure.
func (r *Results) publishPage(ctx context.Context, evs []store.OutboxEvent) ([]store.OutboxPublished, error) {
	done := make([]store.OutboxPublished, 0, len(evs))
	msgs := make([]queue.ResultMsg, len(evs))
	for i, ev := range evs {
		subject, data, err := r.Event(ev)
		if err != nil {
			return done, err
		}
		msgs[i] = queue.ResultMsg{Subject: subject, MsgID: ev.EventID, Data: data}
	}
	for start := 0; start < len(evs); {
		end := start
		for end < len(evs)-1 && evs[end].Type != store.EventErased {
			end++
		}
		for k, st := range r.cfg.Stream.PublishMany(ctx, msgs[start:end+1]) {
			ev := evs[start+k]
			if st.Err != nil {
				// The rows after it may be stored too: published again
				// under the same ids, the stream answers duplicate with
				// their sequences.
				return done, st.Err
			}
			if ev.Type == store.EventErased {
				// The erased event stays; every earlier event of the
				// message, of whichever schema, goes. A duplicate answer
				// gives the copy's sequence, so a purge that failed is
				// done again on the next pass.
				if err := r.cfg.Stream.PurgeBefore(ctx, r.cfg.NATS.ResultsMessageFilter(MessageKey(ev.Source, ev.ExternalID)), st.Seq); err != nil {
					return done, err
				}
				r.cfg.Metrics.purged()
			}
			done = append(done, store.OutboxPublished{ID: ev.ID, StreamSeq: st.Seq})
		}
		start = end + 1
	}
	return done, nil
}

// ResultsChecked is what one Check did.
type ResultsChecked struct {
	// Lost: the stream is not the one the rows were published to (made
	// again, or its last sequence is below one recorded); Republish rows
	// were marked to be published again.
	Lost       bool
	Republish  int
	Pruned     int
	StreamMade bool // the stream did not exist and was made
}

// Check makes the stream if it does not exist, marks every row for a
// publish again when the stream lost what it held (see ResultsChecked),
// and prunes rows published more than MaxAge ago. It runs under the
// outbox's lock; Busy returns a zero ResultsChecked.
func (r *Results) Check(ctx context.Context) (ResultsChecked, error) {
	var c ResultsChecked
	err := r.cfg.Store.InTx(ctx, func(tx store.DBTX) error {
		st, err := r.cfg.Store.ResultsOutboxLock(ctx, tx)
		if errors.Is(err, store.ErrOutboxBusy) {
			return nil
		}
		if err != nil {
			return err
		}
		created, last, err := r.cfg.Stream.Info(ctx)
		if queue.IsStreamNotFound(err) {
			c.StreamMade = true
			created, err = r.cfg.Stream.Ensure(ctx)
		}
		if err != nil {
			return err
		}
		created = created.UTC().Truncate(time.Microsecond)
		if st.StreamCreated != nil {
			maxSeq, err := r.cfg.Store.ResultsOutboxMaxSeq(ctx, tx)
			if err != nil {
				return err
			}
			if !st.StreamCreated.Equal(created) || maxSeq > last {
				c.Lost = true
				if c.Republish, err = r.cfg.Store.ResultsOutboxRepublish(ctx, tx, created); err != nil {
					return err
				}
				r.log.Error("the results stream lost the events published to it; publishing the outbox's rows again",
					zap.String("stream", r.cfg.Stream.Name()), zap.Time("stream_created", created),
					zap.Time("published_to_created", *st.StreamCreated), zap.Uint64("highest_recorded_seq", maxSeq),
					zap.Uint64("stream_last_seq", last), zap.Int("rows", c.Republish))
			}
		}
		if r.cfg.MaxAge > 0 {
			if c.Pruned, err = r.cfg.Store.ResultsOutboxPrune(ctx, tx, time.Now().Add(-r.cfg.MaxAge)); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return c, fmt.Errorf("relay.Results.Check: %w", err)
	}
	if c.Lost {
		r.cfg.Metrics.republished(c.Republish)
		r.Wake()
	}
	return c, nil
}

// ResultsOptions configures Results.Run.
type ResultsOptions struct {
	// PublishEvery is how often a publish pass runs without a Wake.
	// Default 500ms.
	PublishEvery time.Duration
	// CheckEvery is how often Check runs. Default 1m.
	CheckEvery time.Duration
}

// Run publishes the outbox (on every Wake and every PublishEvery; a pass
// that reached its limit runs again at once) and checks the stream every
// CheckEvery, until ctx is done. A pass that fails is logged and tried
// again on the next tick.
func (r *Results) Run(ctx context.Context, o ResultsOptions) {
	if o.PublishEvery <= 0 {
		o.PublishEvery = 500 * time.Millisecond
	}
	if o.CheckEvery <= 0 {
		o.CheckEvery = time.Minute
	}
	pub := time.NewTicker(o.PublishEvery)
	defer pub.Stop()
	check := time.NewTicker(o.CheckEvery)
	defer check.Stop()
	failed := 0
	for {
		select {
		case <-ctx.Done():
			return
		case <-check.C:
			if _, err := r.Check(ctx); err != nil && ctx.Err() == nil {
				r.log.Warn("results stream check failed", zap.Error(err))
			}
			continue
		case <-pub.C:
		case <-r.wake:
		}
		for ctx.Err() == nil {
			res, err := r.Publish(ctx)
			if err != nil {
				if ctx.Err() == nil && failed%20 == 0 {
					r.log.Warn("publishing the results outbox failed; trying again", zap.Error(err), zap.Int("published", res.Events))
				}
				failed++
				// A stream gone (deleted, or its server lost its store)
				// is made again here rather than at the next check.
				if _, cerr := r.Check(ctx); cerr != nil && ctx.Err() == nil && failed%20 == 1 {
					r.log.Warn("results stream check failed", zap.Error(cerr))
				}
				break
			}
			failed = 0
			if !res.More {
				break
			}
		}
	}
}

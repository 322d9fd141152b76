package worker

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"os"
	"strconv"
	"time"

	"go.uber.org/zap"

	"github.com/extractq/extractq/queue"
	"github.com/extractq/extractq/store"
)

// A worker leases the run it works on (store.RunLeaseTake): the lease
// names the worker and the stream copy it works on, holds Config.LeaseTTL
// and is extended with each in-progress signal of that copy
// (extendLease). A second copy of the run delivered while the lease is
// live (a republish by the relay's sweeper or reconciler, a requeue whose
// ack was lost) is acked without a provider call: the holder's copy stays
// on the stream until the run has an outcome or a new copy, and the run
// row now points to it. Nothing is lost when the holder dies: its copy is
// delivered again once the ack wait passes, and a delivery of the very
// copy under lease takes the lease over; any other copy waits for the
// lease to end (the reconciler republishes the run if its copy is gone by
// then). A requeued copy takes over the lease on the copy it replaces,
// which its worker gave up (and a requeue ends the lease as it records
// the new copy, relay.Relay.Requeue).

// newLeaseOwner returns this process's name on its leases:
// "<host>/<pid>/<random hex>".
func newLeaseOwner() string {
	host, _ := os.Hostname()
	var b [4]byte
	rand.Read(b[:])
	return host + "/" + strconv.Itoa(os.Getpid()) + "/" + hex.EncodeToString(b[:])
}

// startRun reads d's run with its message and takes the run's lease for
// d's copy: in a transaction shared with other runs' steps when outcomes
// are batched (committer.start), else one step after the other. A run
// that is not queued gets store.LeaseDone with its status and no lease.
func (w *Worker) startRun(ctx context.Context, d *queue.Delivery) store.RunStart {
	p := w.leaseParams(d)
	if com := w.com; com != nil {
		if rs, err := com.start(p); !errors.Is(err, errCommitterClosed) {
			return rs
		}
	}
	rctx, cancel := context.WithTimeout(ctx, w.cfg.DBTimeout)
	defer cancel()
	rw, err := w.cfg.Store.RunGetWithMessage(rctx, w.cfg.Store.Pool, store.RunGetParams{MessageID: p.MessageID, RunNo: p.RunNo})
	if err != nil || rw.Run.Status != store.RunQueued {
		return store.RunStart{Run: rw, Lease: store.RunLease{State: store.LeaseDone, Status: rw.Run.Status}, Err: err}
	}
	l, err := w.cfg.Store.RunLeaseTake(rctx, w.cfg.Store.Pool, p)
	return store.RunStart{Run: rw, Lease: l, Err: err}
}

// leaseDecision says what to do with a delivery whose run's lease came
// out as l: ok is true when the run is this delivery's to work on; else
// dec says what to do with it.
func (w *Worker) leaseDecision(log *zap.Logger, l store.RunLease) (dec queue.Decision, ok bool) {
	switch l.State {
	case store.LeaseDone:
		log.Debug("run already has an outcome; acking redelivery", zap.String("status", l.Status))
		if w.cfg.Metrics != nil {
			w.cfg.Metrics.redeliveries.Inc()
		}
		return queue.Ack(), false
	case store.LeaseHeld:
		log.Debug("another copy of the run is being worked on; acking this one without a call",
			zap.String("lease_owner", l.Holder), zap.Uint64("lease_seq", l.HolderSeq), zap.Time("leased_until", l.Until))
		w.cfg.Metrics.leaseHeld()
		return queue.Ack(), false
	}
	return queue.Decision{}, true
}

// extendLease extends the lease taken for d's copy, if this worker holds
// it; it is the consumer's OnInProgress, so it waits at most
// leaseExtendTimeout (the decision of d waits for it).
func (w *Worker) extendLease(d *queue.Delivery) {
	ctx, cancel := context.WithTimeout(context.Background(), min(w.cfg.DBTimeout, leaseExtendTimeout))
	defer cancel()
	if _, err := w.cfg.Store.RunLeaseExtend(ctx, w.cfg.Store.Pool, w.leaseParams(d)); err != nil {
		w.noteDBError(err)
		w.log.Warn("extending a run's lease failed", zap.Int64("message_id", d.Envelope.MessageID),
			zap.Int("run_no", d.Envelope.RunNo), zap.Error(err))
	}
}

// leaseExtendTimeout bounds one lease extension.
const leaseExtendTimeout = 5 * time.Second

func (w *Worker) leaseParams(d *queue.Delivery) store.RunLeaseParams {
	return store.RunLeaseParams{MessageID: d.Envelope.MessageID, RunNo: d.Envelope.RunNo, Owner: w.owner,
		StreamSeq: d.StreamSeq, Replaces: d.RequeueOf, TTL: w.cfg.LeaseTTL}
}

package erasure

import (
	"context"
	"fmt"
	"time"

	"github.com/extractq/extractq/store"
)

// MinRetention is the youngest cutoff a purge takes: messages younger
// than a day are still being worked on.
const MinRetention = 24 * time.Hour

// PurgeRequest is a purge of every message received before a cutoff.
type PurgeRequest struct {
	// ReceivedBefore is the cutoff: at least MinRetention ago (CheckCutoff).
	ReceivedBefore time.Time
	// Actor (required) and Reason are for the audit log; Via (required) is
	// store.ViaCLI or ViaAPI. An empty Reason is "received before" and the
	// cutoff.
	Actor, Via, Reason string
	// DryRun only counts.
	DryRun bool
	// Progress, if set, is called with the count of messages erased so far
	// after each transaction.
	Progress func(erased int)
}

// CutoffError is a purge cutoff refused: in the future, or less than
// MinRetention ago.
type CutoffError struct {
	Cutoff time.Time
	Future bool // else too recent
}

func (e *CutoffError) Error() string {
	if e.Future {
		return fmt.Sprintf("the cutoff %s is in the future", e.Cutoff.UTC().Format(time.RFC3339))
	}
	return fmt.Sprintf("the cutoff %s is less than %v ago; messages that young are still being worked on", e.Cutoff.UTC().Format(time.RFC3339), MinRetention)
}

// CheckCutoff returns a *CutoffError when cutoff, taken at now, is in
// the future or less than MinRetention ago.
func CheckCutoff(cutoff, now time.Time) error {
	switch {
	case cutoff.After(now):
		return &CutoffError{Cutoff: cutoff, Future: true}
	case now.Sub(cutoff) < MinRetention:
		return &CutoffError{Cutoff: cutoff}
	}
	return nil
}

// Purge erases, as store.Erasure describes, every message received before
// req.ReceivedBefore that has no queued run and no open triage item, one
// chunk of messages per transaction (store.MessagesPurge), and counts
// those it kept. It returns a *CutoffError for a cutoff CheckCutoff
// refuses, and store's error when Postgres fails: the chunks committed
// before stay erased, and the result counts them.
func (s *Service) Purge(ctx context.Context, req PurgeRequest) (store.PurgeResult, error) {
	if err := CheckCutoff(req.ReceivedBefore, time.Now()); err != nil {
		return store.PurgeResult{}, err
	}
	if req.Reason == "" {
		req.Reason = "received before " + req.ReceivedBefore.UTC().Format(time.RFC3339)
	}
	return s.st.MessagesPurge(ctx, store.PurgeParams{
		ErasureParams:  store.ErasureParams{Actor: req.Actor, Via: req.Via, Reason: req.Reason},
		ReceivedBefore: req.ReceivedBefore, DryRun: req.DryRun, Progress: req.Progress,
	})
}

package triage

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"

	"go.uber.org/zap"

	"github.com/extractq/extractq/store"
)

// Multi-select (docs/triage.md, "Bulk decisions"): the queue page's
// checkboxes, or the API, name items by id, and one POST decides each of
// them with the same checks, store calls and audit entries as its single
// action, and reports per item what happened:
//
//   - approve (reviewers): the item's draft, as its page shows, validates
//     and Approve would send it (pageRecord); approved only when it
//     validates with no error at all (an override needs a reason written
//     for the item) and is not a lenient parse of a reply (which needs
//     each field confirmed on the item's page). An API caller may pin the
//     record by its digest (recordDigest): another record is not
//     approved;
//   - reject (reviewers), with one reason for every item;
//   - rerun (admins only, as every bulk re-run: POST /items/bulk-rerun),
//     with one note.
//
// An item another reviewer holds, or already decided, is skipped with
// the conflict; the others are decided. Each decision is its own
// transaction and audit entry, as the single action's.

// MaxBulkItems is the most items one bulk POST names.
const MaxBulkItems = 200

// Bulk actions.
const (
	bulkApprove = "approve"
	bulkReject  = "reject"
	bulkRerun   = "rerun"
)

// bulkOutcome is what a bulk action did to one item.
type bulkOutcome struct {
	ItemID int64 `json:"item_id"`
	// Status is the item's decision now (approved, rejected, rerun), or
	// "skipped" when nothing was done to it.
	Status string `json:"status"`
	// Code is why an item was skipped: the API error code the single
	// action would have answered (conflict, unprocessable, not_found,
	// invalid).
	Code string `json:"code,omitempty"`
	// Message says why it was skipped, or what was done.
	Message string `json:"message,omitempty"`
	// Digest is the approved record's (recordDigest).
	Digest string `json:"digest,omitempty"`
	// RunNo is the run a re-run started.
	RunNo int `json:"run_no,omitempty"`
}

const bulkSkipped = "skipped"

// bulkReport is what one bulk POST did, item by item, in the order
// given.
type bulkReport struct {
	Action   string        `json:"action"`
	Done     int           `json:"done"`
	Skipped  int           `json:"skipped"`
	Outcomes []bulkOutcome `json:"results"`
}

// bulkRequest is a bulk POST: the action, the items, and what the action
// takes.
type bulkRequest struct {
	Action string  `json:"action"`
	IDs    []int64 `json:"ids"`
	// Reason is a rejection's; Note a re-run's.
	Reason string `json:"reason"`
	Note   string `json:"note"`
	// Digests pins, by item id, the record an approval may take (API).
	Digests map[string]string `json:"digests"`
}

// check refuses a request naming no item, too many, an item twice, or an
// action the route does not take (allowed).
func (q *bulkRequest) check(allowed ...string) error {
	if !contains(allowed, q.Action) {
		return invalidf("action %s: want %s", quoteValue(q.Action), strings.Join(allowed, " or "))
	}
	if len(q.IDs) == 0 {
		return invalidf("no item selected: tick the items to %s", q.Action)
	}
	if len(q.IDs) > MaxBulkItems {
		return invalidf("%d items: at most %d in one bulk action", len(q.IDs), MaxBulkItems)
	}
	seen := make(map[int64]bool, len(q.IDs))
	for _, id := range q.IDs {
		if id < 1 {
			return invalidf("item id %d is not a positive number", id)
		}
		if seen[id] {
			return invalidf("item %d is named twice", id)
		}
		seen[id] = true
	}
	if q.Action == bulkReject && strings.TrimSpace(q.Reason) == "" {
		return invalidf("a rejection needs a reason: write one for the items selected")
	}
	return nil
}

// readBulkForm reads a page's bulk form: action, the ticked ids (id),
// reason and note.
func readBulkForm(r *http.Request) (bulkRequest, error) {
	if err := r.ParseForm(); err != nil {
		return bulkRequest{}, bodyError(r, "form", err)
	}
	q := bulkRequest{Action: r.PostForm.Get("action"), Reason: r.PostForm.Get("reason"), Note: r.PostForm.Get("note")}
	for _, v := range r.PostForm["id"] {
		id, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			return q, invalidf("item id %s is not a number", quoteValue(v))
		}
		q.IDs = append(q.IDs, id)
	}
	return q, nil
}

// pageRecord is the record item it's page validates and its Approve
// sends: the draft, as the generated form posts it (itemViewOf).
func (s *Server) pageRecord(it *itemState) any {
	record := it.Draft
	if it.Doc != nil && it.D.Item.Status == store.TriageOpen {
		if rt, perrs := parseForm(it.Doc, formValues(s.draftForm(it, record))); len(perrs) == 0 {
			record = rt
		}
	}
	return record
}

// bulkDecide does q (checked) to each item, in order, and reports.
func (s *Server) bulkDecide(ctx context.Context, q bulkRequest) bulkReport {
	rep := bulkReport{Action: q.Action, Outcomes: make([]bulkOutcome, 0, len(q.IDs))}
	for _, id := range q.IDs {
		o := s.bulkOne(ctx, q, id)
		if o.Status == bulkSkipped {
			rep.Skipped++
		} else {
			rep.Done++
		}
		rep.Outcomes = append(rep.Outcomes, o)
	}
	s.log.Info("bulk decision", zap.String("action", q.Action), zap.Int("items", len(q.IDs)),
		zap.Int("done", rep.Done), zap.Int("skipped", rep.Skipped), zap.String("reviewer", reviewerFrom(ctx).Login))
	return rep
}

// bulkOne does q's action to item id with the single action's checks.
func (s *Server) bulkOne(ctx context.Context, q bulkRequest, id int64) bulkOutcome {
	o := bulkOutcome{ItemID: id}
	skip := func(err error) bulkOutcome {
		st := statusOf(err)
		if st >= 500 {
			s.log.Error("bulk decision", zap.String("action", q.Action), zap.Int64("item_id", id), zap.Error(err))
		}
		o.Status, o.Message = bulkSkipped, publicMessage(err, st)
		if code, ok := codeOf(err); ok && st < 500 {
			o.Code = string(code)
		} else {
			o.Code = "internal"
		}
		return o
	}
	switch q.Action {
	case bulkApprove:
		it, err := s.loadItem(ctx, id)
		if err != nil {
			return skip(err)
		}
		if it.Entry == nil {
			return skip(fmt.Errorf("%w: schema %s is not configured here", ErrConflict, it.D.Item.SchemaID))
		}
		if err := it.decidableBy(reviewerFrom(ctx).Login); err != nil {
			return skip(err)
		}
		if it.Lenient {
			return skip(&ValidationError{Msg: "read leniently from a reply that is not valid JSON: confirm every field on its page"})
		}
		rec := s.pageRecord(it)
		digest := recordDigest(rec)
		if want, ok := q.Digests[strconv.FormatInt(id, 10)]; ok && want != digest {
			return skip(fmt.Errorf("%w: the item's record is not the one of digest %s any more (now %s): check it again", ErrConflict, want, digest))
		}
		if _, err := s.approve(ctx, it, rec, nil, ""); err != nil {
			if ve, ok := errors.AsType[*ValidationError](err); ok {
				what := plural(len(ve.Errors), "error")
				if ve.Overridable {
					what += ", grounding only: an override needs its own reason, on its page"
				} else {
					what += ": fix them on its page"
				}
				return skip(&ValidationError{Errors: ve.Errors, Overridable: ve.Overridable, Msg: "does not validate (" + what + ")"})
			}
			return skip(err)
		}
		o.Status, o.Digest, o.Message = store.TriageApproved, digest, "approved: its record is the message's result"
	case bulkReject:
		if err := s.reject(ctx, id, q.Reason); err != nil {
			return skip(err)
		}
		o.Status, o.Message = store.TriageRejected, "rejected"
	case bulkRerun:
		run, published, err := s.rerun(ctx, id, q.Note)
		if err != nil {
			return skip(err)
		}
		o.Status, o.RunNo = store.TriageRerun, run.RunNo
		o.Message = fmt.Sprintf("run %d queued", run.RunNo)
		if published {
			o.Message += " and published"
		}
	}
	return o
}

// sessBulk is the session key of the last bulk report, shown once by the
// queue page the bulk POST redirects to.
const sessBulk = "bulk_report"

// bulkPage is POST /items/bulk (approve, reject) and POST
// /items/bulk-rerun (rerun): the queue page's form. It decides, keeps
// the report for the queue page, and goes back to the queue with the
// form's filter (so a reload posts nothing again).
func (s *Server) bulkPage(allowed ...string) handlerFunc {
	return func(w http.ResponseWriter, r *http.Request) error {
		ctx := r.Context()
		q, err := readBulkForm(r)
		if err == nil {
			err = q.check(allowed...)
		}
		f := s.filterOf(r)
		if statusOf(err) == http.StatusBadRequest {
			s.setFlash(ctx, "Nothing done: "+publicMessage(err, http.StatusBadRequest), true)
			http.Redirect(w, r, queueURL(f), http.StatusSeeOther)
			return nil
		}
		if err != nil {
			return err
		}
		rep := s.bulkDecide(ctx, q)
		raw, err := json.Marshal(rep)
		if err != nil {
			return err
		}
		s.sessions.Put(ctx, sessBulk, string(raw))
		s.setFlash(ctx, rep.Summary(), rep.Skipped > 0)
		http.Redirect(w, r, queueURL(f), http.StatusSeeOther)
		return nil
	}
}

// popBulkReport returns the session's last bulk report, once; nil when
// there is none.
func (s *Server) popBulkReport(ctx context.Context) *bulkReport {
	raw := s.sessions.PopString(ctx, sessBulk)
	if raw == "" {
		return nil
	}
	var rep bulkReport
	if err := json.Unmarshal([]byte(raw), &rep); err != nil {
		return nil
	}
	return &rep
}

// Summary says what the report did in one line: "Approved 3 items; 1
// skipped (see below)."
func (rep bulkReport) Summary() string {
	verb := map[string]string{bulkApprove: "Approved", bulkReject: "Rejected", bulkRerun: "Re-ran"}[rep.Action]
	msg := fmt.Sprintf("%s %s", verb, plural(rep.Done, "item"))
	if rep.Skipped > 0 {
		msg += fmt.Sprintf("; %d skipped (see below)", rep.Skipped)
	}
	return msg + "."
}

// apiBulk is POST /api/v1/items/bulk (approve, reject) and POST
// /api/v1/items/bulk-rerun (rerun): {"action", "ids": [...], "reason",
// "note", "digests": {"<id>": "<sha256>"}} → the report, 200 whatever
// each item's outcome.
func (s *Server) apiBulk(allowed ...string) handlerFunc {
	return func(w http.ResponseWriter, r *http.Request) error {
		var q bulkRequest
		if err := decodeBody(w, r, &q); err != nil {
			return err
		}
		if err := q.check(allowed...); err != nil {
			return err
		}
		writeJSON(w, http.StatusOK, s.bulkDecide(r.Context(), q))
		return nil
	}
}

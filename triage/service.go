package triage

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	jsonpatch "github.com/evanphx/json-patch/v5"
	"github.com/kaptinlin/jsonrepair"
	"go.uber.org/zap"

	"github.com/extractq/extractq/extracttype"
	"github.com/extractq/extractq/pipeline"
	"github.com/extractq/extractq/relay"
	"github.com/extractq/extractq/store"
)

// The actions, shared by the pages and the JSON API.

// MinOverrideReason is the shortest written reason that overrides a
// grounding error.
const MinOverrideReason = 5

// itemState is an item with what the views and actions derive from it.
type itemState struct {
	D     store.TriageItemDetail
	Entry *SchemaEntry // nil when the item's schema is not configured here
	Doc   schemaNode   // the schema document, nil with Entry
	// Draft is the record the editor starts from, and DraftSource says
	// where it came from.
	Draft       any
	DraftSource string
	// First and Repair are the parsed replies of the two calls, nil when
	// there is no such call or no JSON object in it; Patched is the first
	// reply with the stored repair patch applied.
	First, Repair, Patched any
	// Lenient is true when the draft comes from a lenient parse of a
	// reply that is not valid JSON (lenientObject): the page says so, and
	// approves it only once the reviewer confirms every field.
	Lenient bool
	// Spans are the evidence spans the reviewer selected, by field path,
	// posted with the record (select.go); nil without any.
	Spans map[string][2]int
}

// loadItem reads item id and derives its draft record.
func (s *Server) loadItem(ctx context.Context, id int64) (*itemState, error) {
	d, err := s.st.TriageItemGet(ctx, s.st.Pool, id)
	if err != nil {
		return nil, err
	}
	it := &itemState{D: d}
	if e, ok := s.cfg.Schemas[d.Item.SchemaID]; ok {
		it.Entry, it.Doc = &e, s.docs[d.Item.SchemaID]
	}
	var repairCall *store.LLMCallRecord
	for i := range d.Calls {
		c := &d.Calls[i]
		switch c.Attempt {
		case 1:
			it.First = parsedObject(c.Reply)
		case 2:
			repairCall = c
			if len(c.Patch) == 0 {
				it.Repair = parsedObject(c.Reply)
			}
		}
	}
	if repairCall != nil && len(repairCall.Patch) > 0 && it.First != nil {
		it.Patched = applyPatch(it.First, repairCall.Patch)
	}

	switch {
	case d.Item.Status == store.TriageApproved && d.Current != nil && d.Current.RunNo == d.Item.RunNo:
		it.Draft, it.DraftSource = decodeRecord(d.Current.Data), "the approved record"
	case it.Held() && decodeRecord(d.Held) != nil:
		it.Draft, it.DraftSource = decodeRecord(d.Held), "the held record: it validated, and a review rule holds it for a person"
	case it.Patched != nil:
		it.Draft, it.DraftSource = it.Patched, "the first reply with the repair patch applied"
	case it.Repair != nil:
		it.Draft, it.DraftSource = it.Repair, "the repair reply"
	case parsedObject(d.LastReply) != nil:
		it.Draft, it.DraftSource = parsedObject(d.LastReply), "the last reply"
	case it.First != nil:
		it.Draft, it.DraftSource = it.First, "the first reply"
	case it.Doc != nil && d.Message.ErasedAt != nil:
		it.Draft, it.DraftSource = skeleton(it.Doc, it.Doc), "an empty record (the replies were erased with the message's text)"
	case lenientObject(d.LastReply) != nil:
		it.Draft, it.DraftSource, it.Lenient = lenientObject(d.LastReply), "a lenient parse of the last reply, which is not valid JSON: confirm every field", true
	case it.Doc != nil:
		it.Draft, it.DraftSource = skeleton(it.Doc, it.Doc), "an empty record (no reply held a JSON object)"
	default:
		it.Draft, it.DraftSource = map[string]any{}, "an empty record"
	}
	return it, nil
}

// Held reports whether the item is a held run's: a record that validated
// and that a review rule (x-review) holds for a person. Its errors are the
// rules that held it (kind held).
func (it *itemState) Held() bool { return it.D.Item.Reason == store.TriageReasonHeld }

// parsedObject returns the one JSON object of a model reply, or nil.
func parsedObject(reply string) any {
	if strings.TrimSpace(reply) == "" {
		return nil
	}
	rep, errs := pipeline.ParseReply(reply)
	if len(errs) > 0 || rep.Object == nil {
		return nil
	}
	return rep.Object
}

// lenientObject returns the object a reply that is nearly JSON holds,
// read leniently: from its first '{' on (prose and a code fence before
// it dropped, a fence after it too), repaired by jsonrepair (trailing
// commas, single quotes, comments, unquoted keys, a cut-off end, as
// josdejong/jsonrepair does). nil when nothing of it reads as an object.
func lenientObject(reply string) any {
	i := strings.IndexByte(reply, '{')
	if i < 0 {
		return nil
	}
	text := reply[i:]
	if j := strings.LastIndex(text, "```"); j > 0 {
		text = text[:j]
	}
	fixed, err := jsonrepair.Repair(text)
	if err != nil {
		return nil
	}
	v, ok := decodeRecord([]byte(fixed)).(map[string]any)
	if !ok {
		return nil
	}
	return v
}

// applyPatch applies a stored (already applied once) RFC 6902 patch to doc.
func applyPatch(doc any, patch []byte) any {
	b, err := json.Marshal(doc)
	if err != nil {
		return nil
	}
	p, err := jsonpatch.DecodePatch(patch)
	if err != nil {
		return nil
	}
	out, err := p.Apply(b)
	if err != nil {
		return nil
	}
	return decodeRecord(out)
}

// decodeRecord decodes a stored record with numbers as json.Number.
func decodeRecord(b []byte) any {
	v, err := pipeline.DecodeStrict(b)
	if err != nil {
		return nil
	}
	return v
}

// validate checks record with the worker's validator (schema, key case,
// the schema's rules, grounding against the message text) and returns its
// errors and the
// evidence of the grounded values found.
func (it *itemState) validate(record any) (extracttype.ErrorList, []extracttype.Evidence) {
	if it.Entry == nil {
		return extracttype.ErrorList{{Kind: extracttype.KindSchema, Keyword: "schema",
			Message: "the schema " + it.D.Item.SchemaID + " is not configured here"}}, nil
	}
	if _, ok := record.(map[string]any); !ok {
		return extracttype.ErrorList{{Kind: extracttype.KindParse, Message: "the record must be a JSON object"}}, nil
	}
	m := it.D.Message
	errs, ev := it.Entry.Schema.ValidateMessage(record, m.Body, pipeline.MessageMeta{Source: m.Source, Metadata: m.Metadata, ReceivedAt: m.ReceivedAt})
	errs = append(errs, pipeline.CheckStrings(record, "")...)
	errs.Sort()
	ev, errs = spanEvidence(m.Body, record, it.Spans, ev, errs)
	return errs, ev
}

// onlyGrounding reports whether every error is a grounding error, the
// one kind a reviewer may override with a written reason.
func onlyGrounding(errs extracttype.ErrorList) bool {
	if len(errs) == 0 {
		return false
	}
	for _, e := range errs {
		if e.Kind != extracttype.KindRule || e.Keyword != "grounded" {
			return false
		}
	}
	return true
}

// decidableBy returns why reviewer login may not decide the item as it
// was loaded, as the store would say it when deciding: an
// *store.ItemClosedError when the item is no longer open, an
// *store.ItemClaimedError when another reviewer holds a live lease. The
// store checks again, under a lock, when it decides.
func (it *itemState) decidableBy(login string) error { return decidable(it.D.Item, login) }

// decidable is decidableBy for an item as loaded.
func decidable(item store.TriageQueueItem, login string) error {
	if item.Status != store.TriageOpen {
		return &store.ItemClosedError{ItemID: item.ID, Status: item.Status}
	}
	// ClaimedBy is set only while the lease is live (the store compares
	// claim_expires with the database's clock).
	if item.ClaimedBy != "" && item.ClaimedBy != login && item.ClaimExpires != nil {
		return &store.ItemClaimedError{ItemID: item.ID, By: item.ClaimedBy, Until: *item.ClaimExpires}
	}
	return nil
}

// approve validates record for item id and, if it validates (or only
// grounding errors remain and reason, space trimmed, is at least
// MinOverrideReason characters), makes it the run's result. Whether the
// reviewer may decide the item at all is checked first (decidableBy), so
// that an item another reviewer holds, or one already decided, is a
// conflict whatever the record. A record that does not pass returns a
// *ValidationError whose Msg tells a missing reason from a too short one.
func (s *Server) approve(ctx context.Context, it *itemState, record any, parseErrs extracttype.ErrorList, reason string) (store.TriageApproval, error) {
	rv := reviewerFrom(ctx)
	if err := it.decidableBy(rv.Login); err != nil {
		return store.TriageApproval{}, err
	}
	errs, ev := it.validate(record)
	errs = append(parseErrs, errs...)
	reason = strings.TrimSpace(reason)
	if len(errs) > 0 {
		ve := &ValidationError{Errors: errs, Overridable: onlyGrounding(errs), ReasonLen: len([]rune(reason))}
		switch {
		case !ve.Overridable:
			ve.Msg = "The record does not validate: fix the errors beside the fields."
			return store.TriageApproval{}, ve
		case ve.ReasonLen == 0:
			ve.Msg = fmt.Sprintf("Only grounding errors remain. A reason is required for overriding grounding errors: "+
				"to approve anyway, write why the value is right (at least %d characters).", MinOverrideReason)
			return store.TriageApproval{}, ve
		case ve.ReasonLen < MinOverrideReason:
			ve.Msg = fmt.Sprintf("Only grounding errors remain. The override reason is too short: %s given, at least %d needed.",
				characters(ve.ReasonLen), MinOverrideReason)
			return store.TriageApproval{}, ve
		}
	} else {
		reason = "" // nothing overridden
	}
	data, err := compactJSON(record)
	if err != nil {
		return store.TriageApproval{}, invalidf("record cannot be encoded: %v", err)
	}
	evidence, err := json.Marshal(ev)
	if err != nil {
		return store.TriageApproval{}, err
	}
	if ev == nil {
		evidence = []byte(`[]`)
	}
	ap, err := s.st.TriageItemApprove(ctx, s.st.Pool, store.TriageItemApproveParams{
		ItemID: it.D.Item.ID, Reviewer: rv.Login, Via: viaFrom(ctx), Data: data, Evidence: evidence,
		SchemaVersion: it.Entry.Schema.Version, Overridden: errs, OverrideReason: reason,
	})
	if err != nil {
		return ap, err
	}
	s.metrics.decided(store.TriageApproved, viaFrom(ctx), 1)
	s.decided(ctx, ap.ItemID, store.TriageApproved)
	s.log.Info("triage item approved", zap.Int64("item_id", ap.ItemID), zap.Int64("message_id", ap.MessageID),
		zap.String("reviewer", rv.Login), zap.Int("overridden_errors", len(errs)))
	return ap, nil
}

// reject closes item id as rejected with reason.
func (s *Server) reject(ctx context.Context, id int64, reason string) error {
	rv := reviewerFrom(ctx)
	reason = strings.TrimSpace(reason)
	if reason == "" || len(reason) > 2000 {
		// As for approve, an item the reviewer may not decide is a
		// conflict whatever the reason; the store checks again when
		// the reason is good.
		d, err := s.st.TriageItemGet(ctx, s.st.Pool, id)
		if err != nil {
			return err
		}
		if err := decidable(d.Item, rv.Login); err != nil {
			return err
		}
		if reason == "" {
			return invalidf("a rejection needs a reason")
		}
		return invalidf("the reason is longer than 2000 bytes")
	}
	if _, err := s.st.TriageItemReject(ctx, s.st.Pool, store.TriageItemRejectParams{
		ItemID: id, Reviewer: rv.Login, Via: viaFrom(ctx), Reason: reason,
	}); err != nil {
		return err
	}
	s.metrics.decided(store.TriageRejected, viaFrom(ctx), 1)
	s.decided(ctx, id, store.TriageRejected)
	s.log.Info("triage item rejected", zap.Int64("item_id", id), zap.String("reviewer", rv.Login))
	return nil
}

// rerun starts a new run of item id's message and publishes it. published
// is false when the run is left for the worker's sweeper.
func (s *Server) rerun(ctx context.Context, id int64, note string) (store.Run, bool, error) {
	rv := reviewerFrom(ctx)
	d, err := s.st.TriageItemGet(ctx, s.st.Pool, id)
	if err != nil {
		return store.Run{}, false, err
	}
	if _, ok := s.cfg.Schemas[d.Item.SchemaID]; !ok {
		return store.Run{}, false, fmt.Errorf("%w: schema %s is not configured, so no worker would run it", ErrConflict, d.Item.SchemaID)
	}
	run, err := s.st.TriageItemRerun(ctx, s.st.Pool, store.TriageItemRerunParams{
		ItemID: id, Reviewer: rv.Login, Via: viaFrom(ctx), Note: strings.TrimSpace(note),
	})
	if err != nil {
		return run, false, err
	}
	n := s.publish(ctx, []store.Run{run})
	s.metrics.decided(store.TriageRerun, viaFrom(ctx), 1)
	s.decided(ctx, id, store.TriageRerun)
	s.log.Info("triage item re-run", zap.Int64("item_id", id), zap.Int64("message_id", run.MessageID),
		zap.Int("run_no", run.RunNo), zap.String("reviewer", rv.Login), zap.Bool("published", n == 1))
	return run, n == 1, nil
}

// bulkResult is what a bulk re-run did.
type bulkResult struct {
	BatchID   string `json:"batch_id"`
	Runs      int    `json:"runs"`
	Published int    `json:"published"`
}

// checkBulkFilter refuses a filter a bulk re-run (and its count) cannot
// take: one without a schema, since the re-runs are extracted with that
// schema's prompt and version, or with a status other than open (or mine,
// which a bulk re-run takes as open), since it re-runs open items only.
// The error wraps ErrInvalid and names the values allowed.
func (s *Server) checkBulkFilter(f Filter) error {
	if f.Schema == "" {
		return invalidf("schema is required: a bulk re-run extracts with one schema; want one of %s", strings.Join(s.schemaIDs(), ", "))
	}
	if f.Status == "mine" {
		return invalidf(`status "mine": a bulk re-run takes every open item of the filter that nobody else holds, not only yours; want open or leave it out`)
	}
	if f.Status != "" {
		return invalidf("status %s: a bulk re-run takes open items only; want open or leave it out", quoteValue(f.Status))
	}
	return nil
}

// checkConfirmed refuses a bulk re-run of f whose confirmed count is not
// a positive number, or is over store.MaxBulkRerun (ErrInvalid). When no item matches f now there is nothing to
// confirm: the error wraps ErrNotFound and names the filter. Otherwise it
// wraps ErrInvalid with ask, which says where the count comes from.
func (s *Server) checkConfirmed(ctx context.Context, f Filter, confirmed int, ask string) error {
	if confirmed > store.MaxBulkRerun {
		return invalidf("%d items: at most %d in one bulk re-run; narrow the filter", confirmed, store.MaxBulkRerun)
	}
	if confirmed >= 1 {
		return nil
	}
	me := reviewerFrom(ctx).Login
	n, err := s.st.TriageBulkRerunCount(ctx, s.st.Pool, f.Store(me, time.Now()), me)
	if err != nil {
		return err
	}
	if n == 0 {
		return fmt.Errorf("%w: nothing to re-run: no open item that nobody else holds matches the filter %s", ErrNotFound, f)
	}
	return invalidf("%s", ask)
}

// bulkRerun re-runs every item matching f (checkBulkFilter), which the
// reviewer confirmed to be confirmed items.
func (s *Server) bulkRerun(ctx context.Context, f Filter, confirmed int, note string) (bulkResult, error) {
	rv := reviewerFrom(ctx)
	if err := s.checkBulkFilter(f); err != nil {
		return bulkResult{}, err
	}
	if _, ok := s.cfg.Schemas[f.Schema]; !ok {
		return bulkResult{}, fmt.Errorf("%w: schema %s is not configured, so no worker would run it", ErrConflict, f.Schema)
	}
	suffix := make([]byte, 3)
	_, _ = rand.Read(suffix)
	batch := fmt.Sprintf("rerun-%s-%x", time.Now().UTC().Format("20060102T150405"), suffix)
	runs, err := s.st.TriageBulkRerun(ctx, s.st.Pool, store.TriageBulkRerunParams{
		Filter: f.Store(rv.Login, time.Now()), Reviewer: rv.Login, Via: viaFrom(ctx), Confirmed: confirmed,
		BatchID: batch, SchemaID: f.Schema, Note: strings.TrimSpace(note),
	})
	if err != nil {
		return bulkResult{}, err
	}
	res := bulkResult{BatchID: batch, Runs: len(runs), Published: s.publish(ctx, runs)}
	s.metrics.decided(store.TriageRerun, viaFrom(ctx), res.Runs)
	s.log.Info("bulk re-run", zap.String("batch_id", batch), zap.Int("runs", res.Runs),
		zap.Int("published", res.Published), zap.String("reviewer", rv.Login))
	return res, nil
}

// publish publishes runs on the stream through the relay, which records
// those stored, and returns how many were. Without a publisher, or on
// failure, runs stay unpublished and the worker's sweeper publishes them.
func (s *Server) publish(ctx context.Context, runs []store.Run) int {
	if s.relay == nil || len(runs) == 0 {
		return 0
	}
	// The request may end; the publish should not.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	if len(runs) == 1 {
		if _, err := s.relay.Publish(ctx, runs[0]); err != nil && !errors.Is(err, relay.ErrNotRecorded) {
			s.log.Warn("re-run not published; the sweeper will publish it", zap.String("dedup_id", runs[0].DedupID), zap.Error(err))
			return 0
		} else if err != nil {
			s.log.Warn("re-run published but not recorded; the sweeper will find it on the stream", zap.String("dedup_id", runs[0].DedupID), zap.Error(err))
		}
		return 1
	}
	return s.relay.PublishMany(ctx, runs)
}

// claimNextAfter claims the next item for the reviewer under f, after
// item after (0: from the start). ok is false when none is left.
func (s *Server) claimNextAfter(ctx context.Context, f Filter, after int64) (store.TriageClaim, bool, error) {
	rv := reviewerFrom(ctx)
	c, err := s.st.TriageItemClaimNext(ctx, s.st.Pool, store.TriageItemClaimNextParams{
		Filter: f.Store(rv.Login, time.Now()), Reviewer: rv.Login, Via: viaFrom(ctx), Lease: s.cfg.Lease, AfterID: after,
	})
	if errors.Is(err, store.ErrNotFound) {
		return c, false, nil
	}
	return c, err == nil, err
}

// characters is "1 character" or "n characters".
func characters(n int) string {
	if n == 1 {
		return "1 character"
	}
	return fmt.Sprintf("%d characters", n)
}

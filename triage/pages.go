package triage

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/extractq/extractq/extracttype"
	"github.com/extractq/extractq/pipeline"
	"github.com/extractq/extractq/store"
)

// queuePageSize is how many items a queue page lists.
const queuePageSize = 50

// queueView is the queue page and its live part.
type queueView struct {
	Filter   Filter
	Items    []store.TriageQueueItem
	Counts   store.TriageCounts
	Schemas  []string
	Kinds    []string
	Statuses []string
	Ages     []struct{ Value, Label string }
	Page     int
	HasMore  bool
	Version  string
	Me       string
	// Admin is true when the reviewer may bulk re-run (an admin).
	Admin bool
	// Notice lists what the queue page left out of its link: filter
	// values it cannot mean and parameters it does not take.
	Notice []string
	// Bulk is the report of the bulk action just done (bulk.go), shown
	// once; nil otherwise.
	Bulk *bulkReport
}

// StatusCounts returns the counts by status in the queue's order.
func (v *queueView) StatusCounts() []store.TriageFacet {
	out := make([]store.TriageFacet, 0, 4)
	for _, st := range []string{store.TriageOpen, store.TriageApproved, store.TriageRejected, store.TriageRerun} {
		out = append(out, store.TriageFacet{Value: st, Count: v.Counts.ByStatus[st]})
	}
	return out
}

// Configured reports whether schema id is one the server is configured
// with, the only ones the schema filter takes.
func (v *queueView) Configured(id string) bool { return contains(v.Schemas, id) }

// queuePageParams are the query parameters the queue page takes.
var queuePageParams = append(append([]string{}, filterParams...), "page")

// queueViewOf builds the queue page (or its live part) for filter f.
func (s *Server) queueViewOf(r *http.Request, f Filter) (*queueView, error) {
	ctx := r.Context()
	rv := reviewerFrom(ctx)
	page := pageNumber(r.URL.Query())
	sf := f.Store(rv.Login, time.Now())
	// Read the version first: a change after it makes the page refresh.
	version, err := s.st.TriageQueueVersion(ctx, s.st.Pool)
	if err != nil {
		return nil, err
	}
	items, err := s.st.TriageQueueList(ctx, s.st.Pool, store.TriageQueueListParams{
		Filter: sf, NewestFirst: f.Sort == "newest", Limit: queuePageSize + 1, Offset: (page - 1) * queuePageSize,
	})
	if err != nil {
		return nil, err
	}
	counts, err := s.st.TriageQueueCounts(ctx, s.st.Pool, sf)
	if err != nil {
		return nil, err
	}
	v := &queueView{Filter: f, Counts: counts, Schemas: s.schemaIDs(), Kinds: filterKinds, Statuses: filterStatuses,
		Ages: filterAges, Page: page, Version: version, Me: rv.Login, Admin: admins.admits(roleFrom(ctx))}
	if len(items) > queuePageSize {
		items, v.HasMore = items[:queuePageSize], true
	}
	v.Items = items
	return v, nil
}

// queuePage lists the queue: filters, counts and the items, oldest first.
// It is lenient so that a stale bookmark (a schema no longer configured,
// a misspelt parameter) still shows the queue: filter values it cannot
// mean and parameters it does not take are left out, and a notice at the
// top names each, with the values or parameters allowed (linkNotice).
// homePage is GET /: the queue, or for an analyst, who reads no customer
// text, the reports.
func (s *Server) homePage(w http.ResponseWriter, r *http.Request) error {
	if !reviewers.admits(roleFrom(r.Context())) {
		http.Redirect(w, r, "/reports", http.StatusSeeOther)
		return nil
	}
	return s.queuePage(w, r)
}

func (s *Server) queuePage(w http.ResponseWriter, r *http.Request) error {
	f, problems, err := s.readFilter(r.Context(), linkQuery(r))
	if err != nil {
		return err
	}
	v, err := s.queueViewOf(r, f)
	if err != nil {
		return err
	}
	v.Notice = linkNotice(r, "the queue", queuePageParams, problems)
	v.Bulk = s.popBulkReport(r.Context())
	return s.render(w, r, http.StatusOK, "queue", "Triage queue", v)
}

// queueLive renders the live part of the queue page (counts and list),
// which the page's script swaps in when the queue changes. Its link is
// the page's (with the filter the page kept), so a filter value it cannot
// mean is refused.
func (s *Server) queueLive(w http.ResponseWriter, r *http.Request) error {
	f, err := s.parseFilter(r.Context(), r.URL.Query())
	if err != nil {
		return err
	}
	v, err := s.queueViewOf(r, f)
	if err != nil {
		return err
	}
	return s.renderPartial(w, "queue", "queue_live", v)
}

// itemID reads the {id} path value.
func itemID(r *http.Request) (int64, error) {
	id, err := strconv.ParseInt(r.PathValue("id"), 10, 64)
	if err != nil || id < 1 {
		return 0, invalidf("item id %q is not a positive number", r.PathValue("id"))
	}
	return id, nil
}

// itemURL is the page of item id under filter f.
func itemURL(id int64, f Filter) string {
	u := "/items/" + strconv.FormatInt(id, 10)
	if q := f.Query(); q != "" {
		u += "?" + q
	}
	return u
}

func queueURL(f Filter) string {
	if q := f.Query(); q != "" {
		return "/?" + q
	}
	return "/"
}

// filterOf reads the filter an item page carries in its query string.
func (s *Server) filterOf(r *http.Request) Filter {
	f, err := s.parseFilter(r.Context(), r.URL.Query())
	if err != nil {
		return Filter{}
	}
	return f
}

// itemPage shows one item.
func (s *Server) itemPage(w http.ResponseWriter, r *http.Request) error {
	id, err := itemID(r)
	if err != nil {
		return err
	}
	it, err := s.loadItem(r.Context(), id)
	if err != nil {
		return err
	}
	v, err := s.itemViewOf(r.Context(), it, s.filterOf(r), viewOpts{})
	if err != nil {
		return err
	}
	v.Live = s.live != nil && v.Open
	return s.render(w, r, http.StatusOK, "item", fmt.Sprintf("Item %d", id), v)
}

// claimPage claims an item (or renews the lease) and shows it.
func (s *Server) claimPage(w http.ResponseWriter, r *http.Request) error {
	ctx := r.Context()
	id, err := itemID(r)
	if err != nil {
		return err
	}
	_, err = s.st.TriageItemClaim(ctx, s.st.Pool, store.TriageItemClaimParams{
		ItemID: id, Reviewer: reviewerFrom(ctx).Login, Via: store.ViaUI, Lease: s.cfg.Lease})
	if err != nil {
		if statusOf(err) != http.StatusConflict {
			return err
		}
		s.setFlash(ctx, publicMessage(err, http.StatusConflict), true)
	}
	http.Redirect(w, r, itemURL(id, s.filterOf(r)), http.StatusSeeOther)
	return nil
}

// releasePage gives up the lease and goes back to the queue.
func (s *Server) releasePage(w http.ResponseWriter, r *http.Request) error {
	ctx := r.Context()
	id, err := itemID(r)
	if err != nil {
		return err
	}
	if _, err := s.st.TriageItemRelease(ctx, s.st.Pool, store.TriageItemReleaseParams{
		ItemID: id, Reviewer: reviewerFrom(ctx).Login, Via: store.ViaUI}); err != nil {
		return err
	}
	s.setFlash(ctx, fmt.Sprintf("Released item %d.", id), false)
	http.Redirect(w, r, queueURL(s.filterOf(r)), http.StatusSeeOther)
	return nil
}

// claimNextPage claims the next item of the filter and shows it.
func (s *Server) claimNextPage(w http.ResponseWriter, r *http.Request) error {
	ctx := r.Context()
	f, err := s.parseFilter(r.Context(), r.URL.Query())
	if err != nil {
		return err
	}
	after, _ := strconv.ParseInt(r.PostFormValue("after"), 10, 64)
	c, ok, err := s.claimNextAfter(ctx, f, after)
	if err != nil {
		return err
	}
	if !ok {
		s.setFlash(ctx, "No open item is left for this filter.", false)
		http.Redirect(w, r, queueURL(f), http.StatusSeeOther)
		return nil
	}
	http.Redirect(w, r, itemURL(c.ItemID, f), http.StatusSeeOther)
	return nil
}

// submittedRecord reads the record an editor form posts: the raw JSON
// view (mode=raw) or the generated form.
func (s *Server) submittedRecord(w http.ResponseWriter, r *http.Request, it *itemState) (any, extracttype.ErrorList, error) {
	if err := r.ParseForm(); err != nil { // capped at MaxRecordBody (Install)
		return nil, nil, bodyError(r, "form", err)
	}
	it.Spans = readSpans(r.PostForm) // select-to-fill (select.go)
	if r.PostForm.Get("mode") == "raw" {
		raw := r.PostForm.Get("record")
		v, err := pipeline.DecodeStrict([]byte(raw))
		if err != nil {
			return map[string]any{}, extracttype.ErrorList{{Kind: extracttype.KindParse, Keyword: "json",
				Message: "the raw JSON does not parse: " + shortJSONError(err)}}, nil
		}
		return v, nil, nil
	}
	if it.Doc == nil {
		return nil, nil, fmt.Errorf("%w: schema %s is not configured here; the item is read only", ErrConflict, it.D.Item.SchemaID)
	}
	v, errs := parseForm(it.Doc, r.PostForm)
	return v, errs, nil
}

// shortJSONError keeps a JSON error's position and drops any quoted input.
func shortJSONError(err error) string {
	msg := err.Error()
	if i := strings.Index(msg, "\""); i > 0 {
		msg = strings.TrimSpace(msg[:i])
	}
	if len(msg) > 120 {
		msg = msg[:120]
	}
	return msg
}

// loadOpenForEdit loads an item the reviewer is editing.
func (s *Server) loadForPost(r *http.Request) (*itemState, error) {
	id, err := itemID(r)
	if err != nil {
		return nil, err
	}
	return s.loadItem(r.Context(), id)
}

// checkPage validates the posted record and shows the item with its
// errors (or, to a script asking for JSON, answers with them). An array
// button (op=add:<path> or del:<path>/<i>) changes the record first; the
// change is not saved until approval.
func (s *Server) checkPage(w http.ResponseWriter, r *http.Request) error {
	it, err := s.loadForPost(r)
	if err != nil {
		return err
	}
	rec, perrs, err := s.submittedRecord(w, r, it)
	if err != nil {
		return err
	}
	op := r.PostForm.Get("op")
	if op != "" && it.Doc != nil {
		// An array button: add or remove an element, unsaved.
		if rec, err = applyArrayOp(it.Doc, rec, op); err != nil {
			return err
		}
	}
	if strings.Contains(r.Header.Get("Accept"), "application/json") {
		errs, ev := it.validate(rec)
		errs = append(perrs, errs...)
		resp := validateResponse(errs)
		resp["record"] = prettyJSON(rec)
		resp["digest"] = recordDigest(rec)
		// The message with the highlights of this record, rendered (and
		// escaped) by the same template as the page.
		segs, _ := highlight(it, errs, ev)
		var html strings.Builder
		if err := s.pages["item"].ExecuteTemplate(&html, "msgsegs", segs); err != nil {
			return err
		}
		resp["message_html"] = html.String()
		writeJSON(w, http.StatusOK, resp)
		return nil
	}
	msg := "The record validates."
	v, err := s.itemViewOf(r.Context(), it, s.filterOf(r), viewOpts{record: rec, parseErrs: perrs, reason: r.PostForm.Get("override_reason")})
	if err != nil {
		return err
	}
	if !v.Valid {
		msg = plural(len(v.Errors), "error") + ": see beside the fields."
	}
	if op == "" {
		v.Message, v.MessageErr = msg, !v.Valid
	}
	return s.render(w, r, http.StatusOK, "item", fmt.Sprintf("Item %d", it.D.Item.ID), v)
}

// approvePage approves the posted record; a record that does not validate
// comes back with its errors beside the fields (422).
func (s *Server) approvePage(w http.ResponseWriter, r *http.Request) error {
	ctx := r.Context()
	it, err := s.loadForPost(r)
	if err != nil {
		return err
	}
	rec, perrs, err := s.submittedRecord(w, r, it)
	if err != nil {
		return err
	}
	if it.Entry == nil {
		return fmt.Errorf("%w: schema %s is not configured here", ErrConflict, it.D.Item.SchemaID)
	}
	reason := r.PostForm.Get("override_reason")
	if it.Lenient && r.PostForm.Get("confirm_lenient") == "" {
		// Every value came from a reply that was not JSON: the reviewer
		// confirms them all before any is a result.
		v, verr := s.itemViewOf(ctx, it, s.filterOf(r), viewOpts{record: rec, parseErrs: perrs, reason: reason,
			message: "Not approved: this record was read leniently from a reply that is not valid JSON; check every field against the message, then tick the box and approve.", messageErr: true})
		if verr != nil {
			return verr
		}
		return s.render(w, r, http.StatusUnprocessableEntity, "item", fmt.Sprintf("Item %d", it.D.Item.ID), v)
	}
	// The page's form always carries the digest of the record it
	// validated, and approves no other. A form without one approves
	// nothing either: scripts approve through the API
	// (POST /api/v1/items/{id}/approve), which has its own rules.
	if got, ok := r.PostForm["validated"]; !ok || len(got) != 1 || got[0] != recordDigest(rec) {
		// The page validated another record than this one (an edit not
		// checked yet, or a page of before): show this one's errors, and
		// approve nothing until the reviewer has seen them.
		msg := "Not approved: the record changed after it was last checked. Here it is, checked; approve again if it is right."
		if !ok {
			msg = "Not approved: the form did not say which record was last checked (its validated field, which the item page sends). " +
				"Here it is, checked; approve again from this page if it is right, or approve through the API (POST /api/v1/items/{id}/approve)."
		}
		v, verr := s.itemViewOf(ctx, it, s.filterOf(r), viewOpts{record: rec, parseErrs: perrs, reason: reason,
			message: msg, messageErr: true})
		if verr != nil {
			return verr
		}
		return s.render(w, r, http.StatusConflict, "item", fmt.Sprintf("Item %d", it.D.Item.ID), v)
	}
	_, err = s.approve(ctx, it, rec, perrs, reason)
	var ve *ValidationError
	if errors.As(err, &ve) {
		v, verr := s.itemViewOf(ctx, it, s.filterOf(r), viewOpts{record: rec, parseErrs: perrs, message: ve.Msg, messageErr: true, reason: reason})
		if verr != nil {
			return verr
		}
		return s.render(w, r, http.StatusUnprocessableEntity, "item", fmt.Sprintf("Item %d", it.D.Item.ID), v)
	}
	if err != nil {
		return s.decisionFailed(w, r, it.D.Item.ID, err)
	}
	return s.nextAfterDecision(w, r, fmt.Sprintf("Approved item %d: its record is now the message's result.", it.D.Item.ID))
}

// rejectPage rejects the item with the posted reason.
func (s *Server) rejectPage(w http.ResponseWriter, r *http.Request) error {
	id, err := itemID(r)
	if err != nil {
		return err
	}
	if err := s.reject(r.Context(), id, r.PostFormValue("reason")); err != nil {
		return s.decisionFailed(w, r, id, err)
	}
	return s.nextAfterDecision(w, r, fmt.Sprintf("Rejected item %d.", id))
}

// reopenPage undoes the reviewer's own approval or rejection of the item
// within Config.UndoWindow (store.TriageItemReopen, audited) and shows
// the item, open and claimed by them.
func (s *Server) reopenPage(w http.ResponseWriter, r *http.Request) error {
	ctx := r.Context()
	id, err := itemID(r)
	if err != nil {
		return err
	}
	err = s.st.TriageItemReopen(ctx, s.st.Pool, store.TriageItemReopenParams{ItemID: id, Reviewer: reviewerFrom(ctx).Login,
		Via: viaFrom(ctx), Within: s.cfg.UndoWindow})
	if errors.Is(err, store.ErrReopenRefused) {
		_, why, _ := strings.Cut(err.Error(), store.ErrReopenRefused.Error())
		s.setFlash(ctx, "Not reopened: "+strings.TrimPrefix(why, ": "), true)
		http.Redirect(w, r, itemURL(id, s.filterOf(r)), http.StatusSeeOther)
		return nil
	}
	if err != nil {
		return err
	}
	s.reopened(ctx, id)
	s.setFlash(ctx, fmt.Sprintf("Reopened item %d: your decision is undone, and the item is yours to decide again.", id), false)
	http.Redirect(w, r, itemURL(id, s.filterOf(r)), http.StatusSeeOther)
	return nil
}

// rerunPage sends the item's message back for a new run.
func (s *Server) rerunPage(w http.ResponseWriter, r *http.Request) error {
	id, err := itemID(r)
	if err != nil {
		return err
	}
	run, published, err := s.rerun(r.Context(), id, r.PostFormValue("note"))
	if err != nil {
		return s.decisionFailed(w, r, id, err)
	}
	msg := fmt.Sprintf("Item %d: run %d of the message is queued", id, run.RunNo)
	if published {
		msg += " and published."
	} else {
		msg += "; the worker's sweeper will publish it."
	}
	return s.nextAfterDecision(w, r, msg)
}

// decisionFailed shows a refused decision (claimed by another, already
// decided, a missing reason) on the item page; other errors go to the
// error page.
func (s *Server) decisionFailed(w http.ResponseWriter, r *http.Request, id int64, err error) error {
	switch statusOf(err) {
	case http.StatusConflict, http.StatusBadRequest:
		s.setFlash(r.Context(), publicMessage(err, statusOf(err)), true)
		http.Redirect(w, r, itemURL(id, s.filterOf(r)), http.StatusSeeOther)
		return nil
	}
	return err
}

// nextAfterDecision claims the next item of the filter and shows it, or
// goes back to the queue when none is left.
func (s *Server) nextAfterDecision(w http.ResponseWriter, r *http.Request, msg string) error {
	ctx := r.Context()
	f := s.filterOf(r)
	c, ok, err := s.claimNextAfter(ctx, f, 0)
	if err != nil {
		return err
	}
	if !ok {
		s.setFlash(ctx, msg+" No open item is left for this filter.", false)
		http.Redirect(w, r, queueURL(f), http.StatusSeeOther)
		return nil
	}
	s.setFlash(ctx, msg+fmt.Sprintf(" Next: item %d. (Undo on the item's page, within %s.)", c.ItemID, s.cfg.UndoWindow), false)
	http.Redirect(w, r, itemURL(c.ItemID, f), http.StatusSeeOther)
	return nil
}

// bulkView is the bulk re-run page.
type bulkView struct {
	Filter  Filter
	Count   int
	Max     int
	Schemas []string
	Prompt  string
	Version string
}

// bulkRerunPage shows how many items a bulk re-run of the filter takes,
// and asks to confirm.
func (s *Server) bulkRerunPage(w http.ResponseWriter, r *http.Request) error {
	ctx := r.Context()
	// Strict, unlike the queue page: a filter parameter left out here
	// would re-run more items than meant.
	if err := checkParams(r, filterParams); err != nil {
		return err
	}
	f, err := s.parseFilter(r.Context(), r.URL.Query())
	if err != nil {
		return err
	}
	v := &bulkView{Filter: f, Max: store.MaxBulkRerun, Schemas: s.schemaIDs()}
	if f.Schema != "" { // without one, the page asks for it
		if err := s.checkBulkFilter(f); err != nil {
			return err
		}
		e := s.cfg.Schemas[f.Schema] // parseFilter refuses a schema not configured
		v.Prompt, v.Version = e.PromptVersion, e.Schema.Version
		if v.Count, err = s.st.TriageBulkRerunCount(ctx, s.st.Pool, f.Store(reviewerFrom(ctx).Login, time.Now()), reviewerFrom(ctx).Login); err != nil {
			return err
		}
	}
	return s.render(w, r, http.StatusOK, "rerun", "Bulk re-run", v)
}

// bulkRerunPost re-runs every item of the filter after confirmation.
func (s *Server) bulkRerunPost(w http.ResponseWriter, r *http.Request) error {
	ctx := r.Context()
	// Strict, unlike the queue page: a filter parameter left out here
	// would re-run more items than meant.
	if err := checkParams(r, filterParams); err != nil {
		return err
	}
	f, err := s.parseFilter(r.Context(), r.URL.Query())
	if err != nil {
		return err
	}
	if err := s.checkBulkFilter(f); err != nil {
		return err
	}
	confirmed, _ := strconv.Atoi(r.PostFormValue("confirmed"))
	if err := s.checkConfirmed(ctx, f, confirmed, "confirm the number of items to re-run"); err != nil {
		return err
	}
	res, err := s.bulkRerun(ctx, f, confirmed, r.PostFormValue("note"))
	if errors.Is(err, store.ErrCountChanged) {
		s.setFlash(ctx, publicMessage(err, http.StatusConflict), true)
		http.Redirect(w, r, "/rerun?"+f.Query(), http.StatusSeeOther)
		return nil
	}
	if err != nil {
		return err
	}
	s.setFlash(ctx, fmt.Sprintf("Re-ran %d items in batch %s; %d published now, the rest by the worker's sweeper.",
		res.Runs, res.BatchID, res.Published), false)
	http.Redirect(w, r, queueURL(f), http.StatusSeeOther)
	return nil
}

// auditQuery is an audit log selection: one item's entries (0: every
// item's) of one person ("": everyone's).
type auditQuery struct {
	ItemID int64
	Actor  string
}

// readAuditQuery reads the item (query parameter itemKey: item on the
// page, item_id in the API) and the actor of an audit log selection from
// q, leaving out an item that is not a positive number or that does not
// exist, and returns a line for each value left out. The error is the
// store's, looking up the item.
func (s *Server) readAuditQuery(ctx context.Context, q url.Values, itemKey string) (auditQuery, []string, error) {
	aq := auditQuery{Actor: strings.TrimSpace(q.Get("actor"))}
	v := strings.TrimSpace(q.Get(itemKey))
	if v == "" {
		return aq, nil, nil
	}
	id, err := strconv.ParseInt(v, 10, 64)
	if err != nil || id < 1 {
		return aq, []string{fmt.Sprintf("%s %s: want an item id (a positive number)", itemKey, quoteValue(v))}, nil
	}
	_, err = s.st.TriageItemGet(ctx, s.st.Pool, id)
	switch {
	case errors.Is(err, store.ErrNotFound):
		return aq, []string{fmt.Sprintf("%s %d: there is no such item", itemKey, id)}, nil
	case err != nil:
		return aq, nil, err
	}
	aq.ItemID = id
	return aq, nil, nil
}

// parseAuditQuery reads q as readAuditQuery does, but refuses what that
// leaves out: the error wraps ErrInvalid and names each such value.
func (s *Server) parseAuditQuery(ctx context.Context, q url.Values, itemKey string) (auditQuery, error) {
	aq, problems, err := s.readAuditQuery(ctx, q, itemKey)
	if err != nil {
		return aq, err
	}
	if len(problems) > 0 {
		return aq, invalidf("%s", strings.Join(problems, "; "))
	}
	return aq, nil
}

// auditPageParams are the query parameters the audit log page takes.
var auditPageParams = []string{"item", "actor"}

// auditView is the audit log page.
type auditView struct {
	Entries []store.AuditEntry
	ItemID  int64
	Actor   string
	// Notice lists what the page left out of its link (linkNotice).
	Notice []string
}

// auditPage shows the newest audit entries, of one item or one person.
// Like the queue page it is lenient: an item that is not a number or does
// not exist, a value that is not text (linkQuery), or a parameter it does
// not take, is left out and named in a notice at the top.
func (s *Server) auditPage(w http.ResponseWriter, r *http.Request) error {
	ctx := r.Context()
	aq, problems, err := s.readAuditQuery(ctx, linkQuery(r), "item")
	if err != nil {
		return err
	}
	v := &auditView{ItemID: aq.ItemID, Actor: aq.Actor, Notice: linkNotice(r, "the audit log", auditPageParams, problems)}
	v.Entries, err = s.st.AuditList(ctx, s.st.Pool, store.AuditListParams{TriageItemID: aq.ItemID, Actor: aq.Actor, Limit: 200})
	if err != nil {
		return err
	}
	return s.render(w, r, http.StatusOK, "audit", "Audit log", v)
}

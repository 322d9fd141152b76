package triage

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"reflect"
	"strconv"
	"strings"
	"time"

	"github.com/extractq/extractq/extracttype"
	"github.com/extractq/extractq/pipeline"
	"github.com/extractq/extractq/store"
)

// The JSON API: the pages' actions for tools, under /api/v1/. Requests
// authenticate with "Authorization: Bearer <token>" (made by `triage admin
// token create`) or, from the pages' script, with the session and its
// CSRF token. Errors are {"error": {"code", "message"[, "errors",
// "overridable"]}} with the status of statusOf. A route refuses, with
// 400, a query parameter it does not take (takes). docs/triage.md has
// curl examples.

// Query parameters the API routes take besides the filter's
// (filterParams); Install gives each route its list.
var (
	itemsParams     = append(append([]string{}, filterParams...), "limit", "offset")
	claimNextParams = append(append([]string{}, filterParams...), "after")
	resultParams    = []string{"schema"}
	auditParams     = []string{"item_id", "actor", "limit"}
)

// takes wraps an API handler so that a link it cannot read is refused
// before the handler runs: a path value that is not text
// (checkPathValues), a query string that does not parse, a parameter not
// in params, one given more than once, or a value that is not text. The
// error wraps ErrInvalid and names the parameter, and, for a parameter
// the route does not take, the method and path and the parameters the
// route takes.
func takes(params []string, h handlerFunc) handlerFunc {
	return func(w http.ResponseWriter, r *http.Request) error {
		if err := checkPathValues(r); err != nil {
			return err
		}
		if err := checkParams(r, params); err != nil {
			return err
		}
		return h(w, r)
	}
}

// checkParams checks r's query string against params (see takes).
func checkParams(r *http.Request, params []string) error {
	route := r.Method + " " + r.URL.Path
	unknown, repeated, notText, err := paramProblems(r, params)
	if err != nil {
		return invalidf("%s: the query string does not parse: %v", route, err)
	}
	accepted := "takes no query parameters"
	if len(params) > 0 {
		accepted = "takes " + strings.Join(params, ", ")
	}
	switch {
	case len(unknown) == 1:
		return invalidf("unknown parameter %s: %s %s", unknown[0], route, accepted)
	case len(unknown) > 1:
		return invalidf("unknown parameters %s: %s %s", strings.Join(unknown, ", "), route, accepted)
	case len(repeated) > 0:
		return invalidf("parameter %s given more than once: %s takes each parameter once", strings.Join(repeated, ", "), route)
	case len(notText) > 0:
		return invalidf("%s", strings.Join(notText, "; "))
	}
	return nil
}

// decodeBody reads a JSON body into v; an empty body leaves v as it is.
// An unknown field, or a key of the body's object given twice, is an
// invalid request naming it.
// The body is capped by its route's limit (limitBody); one over it is
// ErrTooLarge.
func decodeBody(w http.ResponseWriter, r *http.Request, v any) error {
	b, err := io.ReadAll(r.Body)
	if err != nil {
		return bodyError(r, "body", err)
	}
	if len(strings.TrimSpace(string(b))) == 0 {
		return nil
	}
	dec := json.NewDecoder(strings.NewReader(string(b)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		if name, ok := unknownField(err); ok {
			return invalidf("body: unknown field %s: %s %s takes %s", quoteValue(name), r.Method, r.URL.Path, bodyFields(v))
		}
		return invalidf("body: %s", shortJSONError(err))
	}
	// encoding/json keeps the last of a key given twice: refuse it, as
	// the record's own keys are (readRecord). Keys inside a value are that
	// value's reader's to refuse, with its own path.
	if _, err := pipeline.DecodeStrict(b); err != nil {
		if dk, ok := errors.AsType[*pipeline.DuplicateKeyError](err); ok && strings.Count(dk.Path, "/") == 1 {
			return invalidf("body: key %s occurs twice: %s %s takes each key once", quoteValue(strings.TrimPrefix(dk.Path, "/")), r.Method, r.URL.Path)
		}
	}
	return nil
}

// unknownField returns the name of the field a decoder with
// DisallowUnknownFields refused (encoding/json has no error type for it).
func unknownField(err error) (string, bool) {
	q, ok := strings.CutPrefix(err.Error(), "json: unknown field ")
	if !ok {
		return "", false
	}
	name, uerr := strconv.Unquote(q)
	if uerr != nil {
		return "", false
	}
	return name, true
}

// bodyFields lists the JSON fields of the struct v points to, in their
// order, for messages: "record, override_reason".
func bodyFields(v any) string {
	t := reflect.TypeOf(v)
	for t != nil && t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t == nil || t.Kind() != reflect.Struct {
		return "no fields"
	}
	var names []string
	for i := range t.NumField() {
		f := t.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		switch {
		case name == "-" || !f.IsExported():
			continue
		case name == "":
			name = f.Name
		}
		names = append(names, name)
	}
	if len(names) == 0 {
		return "no fields"
	}
	return strings.Join(names, ", ")
}

// apiItem is an item as the API lists it.
type apiItem struct {
	ID             int64                 `json:"id"`
	MessageID      int64                 `json:"message_id"`
	Source         string                `json:"source"`
	ExternalID     string                `json:"external_id"`
	RunNo          int                   `json:"run_no"`
	BatchID        string                `json:"batch_id"`
	SchemaID       string                `json:"schema_id"`
	Status         string                `json:"status"`
	Reason         string                `json:"reason"`
	Errors         extracttype.ErrorList `json:"errors"`
	ClaimedBy      string                `json:"claimed_by,omitempty"`
	ClaimExpires   *time.Time            `json:"claim_expires,omitempty"`
	DecidedBy      string                `json:"decided_by,omitempty"`
	DecidedAt      *time.Time            `json:"decided_at,omitempty"`
	DecisionReason string                `json:"decision_reason,omitempty"`
	RerunNo        *int                  `json:"rerun_no,omitempty"`
	CreatedAt      time.Time             `json:"created_at"`
}

func apiItemOf(it store.TriageQueueItem) apiItem {
	errs := it.Errors
	if errs == nil {
		errs = extracttype.ErrorList{}
	}
	return apiItem{ID: it.ID, MessageID: it.MessageID, Source: it.Source, ExternalID: it.ExternalID, RunNo: it.RunNo,
		BatchID: it.BatchID, SchemaID: it.SchemaID, Status: it.Status, Reason: it.Reason, Errors: errs,
		ClaimedBy: it.ClaimedBy, ClaimExpires: it.ClaimExpires, DecidedBy: it.DecidedBy, DecidedAt: it.DecidedAt,
		DecisionReason: it.DecisionReason, RerunNo: it.RerunNo, CreatedAt: it.CreatedAt}
}

// apiMe says who is asking; with an API token, which token and when it
// expires.
func (s *Server) apiMe(w http.ResponseWriter, r *http.Request) error {
	rv := reviewerFrom(r.Context())
	me := map[string]any{"login": rv.Login, "name": rv.Name, "local": s.localOnly(), "role": roleFrom(r.Context()),
		"account_role": rv.Role}
	if t := tokenFrom(r.Context()); t != nil {
		me["token"] = map[string]any{"id": t.ID, "name": t.Name, "created_at": t.CreatedAt, "expires_at": t.ExpiresAt, "role": t.Role}
	}
	writeJSON(w, http.StatusOK, me)
	return nil
}

// apiItems lists items: the queue filter (status, schema, kind, path,
// batch, age, sort, q, cohort) and limit (default 50, at most 500) and offset.
func (s *Server) apiItems(w http.ResponseWriter, r *http.Request) error {
	ctx := r.Context()
	q := r.URL.Query()
	f, err := s.parseFilter(r.Context(), q)
	if err != nil {
		return err
	}
	limit, offset := 50, 0
	if v := q.Get("limit"); v != "" {
		if limit, err = strconv.Atoi(v); err != nil || limit < 1 || limit > 500 {
			return invalidf("limit %q: want 1 to 500", v)
		}
	}
	if v := q.Get("offset"); v != "" {
		if offset, err = strconv.Atoi(v); err != nil || offset < 0 {
			return invalidf("offset %q: want 0 or more", v)
		}
	}
	sf := f.Store(reviewerFrom(ctx).Login, time.Now())
	items, err := s.st.TriageQueueList(ctx, s.st.Pool, store.TriageQueueListParams{Filter: sf, NewestFirst: f.Sort == "newest", Limit: limit, Offset: offset})
	if err != nil {
		return err
	}
	counts, err := s.st.TriageQueueCounts(ctx, s.st.Pool, sf)
	if err != nil {
		return err
	}
	out := make([]apiItem, len(items))
	for i, it := range items {
		out[i] = apiItemOf(it)
	}
	writeJSON(w, http.StatusOK, map[string]any{"total": counts.Total, "items": out})
	return nil
}

// apiCounts returns the queue's counts and facets for the filter.
func (s *Server) apiCounts(w http.ResponseWriter, r *http.Request) error {
	ctx := r.Context()
	f, err := s.parseFilter(r.Context(), r.URL.Query())
	if err != nil {
		return err
	}
	if err := s.authorizeSearch(r, f); err != nil {
		return err
	}
	counts, err := s.st.TriageQueueCounts(ctx, s.st.Pool, f.Store(reviewerFrom(ctx).Login, time.Now()))
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, counts)
	return nil
}

// apiCall is an LLM call as the API shows it.
type apiCall struct {
	Attempt          int             `json:"attempt"`
	Purpose          string          `json:"purpose"`
	Model            string          `json:"model"`
	PromptVersion    string          `json:"prompt_version"`
	SchemaVersion    string          `json:"schema_version"`
	RepairStrategy   string          `json:"repair_strategy,omitempty"`
	PromptTokens     int             `json:"prompt_tokens"`
	CompletionTokens int             `json:"completion_tokens"`
	CostUSD          float64         `json:"cost_usd"`
	LatencyMS        int             `json:"latency_ms"`
	FinishReason     string          `json:"finish_reason"`
	Valid            bool            `json:"valid"`
	Reply            string          `json:"reply"`
	Patch            json.RawMessage `json:"patch,omitempty"`
}

// apiItem returns one item with its message, calls, draft record, the
// draft's errors now and the highlights of grounded values.
func (s *Server) apiItem(w http.ResponseWriter, r *http.Request) error {
	ctx := r.Context()
	id, err := itemID(r)
	if err != nil {
		return err
	}
	it, err := s.loadItem(ctx, id)
	if err != nil {
		return err
	}
	d := it.D
	calls := make([]apiCall, len(d.Calls))
	for i, c := range d.Calls {
		calls[i] = apiCall{Attempt: c.Attempt, Purpose: c.Purpose, Model: c.Model, PromptVersion: c.PromptVersion,
			SchemaVersion: c.SchemaVersion, RepairStrategy: c.RepairStrategy, PromptTokens: c.PromptTokens,
			CompletionTokens: c.CompletionTokens, CostUSD: c.CostUSD, LatencyMS: c.LatencyMS, FinishReason: c.FinishReason,
			Valid: c.Valid, Reply: c.Reply, Patch: c.Patch}
	}
	errs, ev := it.validate(it.Draft)
	if errs == nil {
		errs = extracttype.ErrorList{}
	}
	if ev == nil {
		ev = []extracttype.Evidence{}
	}
	out := map[string]any{
		"item": apiItemOf(d.Item),
		"message": map[string]any{"id": d.Message.ID, "source": d.Message.Source, "external_id": d.Message.ExternalID,
			"text": d.Message.Body, "flags": d.Message.Flags, "received_at": d.Message.ReceivedAt,
			"erased_at": d.Message.ErasedAt},
		"last_reply":   d.LastReply,
		"calls":        calls,
		"draft":        it.Draft,
		"draft_source": it.DraftSource,
		"draft_errors": errs,
		"evidence":     ev,
		// The digest of the draft as the item page validates it and a
		// bulk approve takes it (bulk.go: pin it in "digests").
		"draft_digest": recordDigest(s.pageRecord(it)),
	}
	if d.Current != nil {
		out["current_result"] = resultOf(*d.Current)
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

func resultOf(e store.Extraction) map[string]any {
	return map[string]any{"message_id": e.MessageID, "external_id": e.ExternalID, "run_no": e.RunNo,
		"schema_id": e.SchemaID, "schema_version": e.SchemaVersion, "outcome": e.Outcome, "data": e.Data,
		"evidence": e.Evidence, "created_by": e.CreatedBy, "created_at": e.CreatedAt, "human_made": e.Outcome == "approved"}
}

func claimJSON(c store.TriageClaim) map[string]any {
	return map[string]any{"item_id": c.ItemID, "claimed_by": c.ClaimedBy, "claim_expires": c.Expires, "renewed": c.Renewed}
}

// apiClaim claims an item or renews the caller's lease.
func (s *Server) apiClaim(w http.ResponseWriter, r *http.Request) error {
	ctx := r.Context()
	id, err := itemID(r)
	if err != nil {
		return err
	}
	c, err := s.st.TriageItemClaim(ctx, s.st.Pool, store.TriageItemClaimParams{
		ItemID: id, Reviewer: reviewerFrom(ctx).Login, Via: viaFrom(ctx), Lease: s.cfg.Lease})
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, claimJSON(c))
	return nil
}

// apiClaimNext claims the oldest open item of the query's filter (after
// item ?after=, an item id, when given); 404 when none is left.
func (s *Server) apiClaimNext(w http.ResponseWriter, r *http.Request) error {
	f, err := s.parseFilter(r.Context(), r.URL.Query())
	if err != nil {
		return err
	}
	// The filter's status and order are the queue's: claim-next always
	// takes an open item nobody holds, oldest first.
	if f.Status != "" {
		return invalidf("status %s: claim-next claims open items only; want open or leave it out", quoteValue(f.Status))
	}
	if f.Sort != "" {
		return invalidf("sort %s: claim-next claims the oldest open item first; want oldest or leave it out", quoteValue(f.Sort))
	}
	var after int64
	if v := r.URL.Query().Get("after"); v != "" {
		if after, err = strconv.ParseInt(v, 10, 64); err != nil || after < 1 {
			return invalidf("after %s: want an item id (a positive number)", quoteValue(v))
		}
	}
	c, ok, err := s.claimNextAfter(r.Context(), f, after)
	if err != nil {
		return err
	}
	if !ok {
		return fmt.Errorf("%w: no open item left for this filter", ErrNotFound)
	}
	writeJSON(w, http.StatusOK, claimJSON(c))
	return nil
}

func (s *Server) apiRelease(w http.ResponseWriter, r *http.Request) error {
	ctx := r.Context()
	id, err := itemID(r)
	if err != nil {
		return err
	}
	released, err := s.st.TriageItemRelease(ctx, s.st.Pool, store.TriageItemReleaseParams{
		ItemID: id, Reviewer: reviewerFrom(ctx).Login, Via: viaFrom(ctx)})
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, map[string]any{"item_id": id, "released": released})
	return nil
}

// recordBody is the body of validate and approve.
type recordBody struct {
	Record         json.RawMessage `json:"record"`
	OverrideReason string          `json:"override_reason"`
}

// readRecord decodes the body's record strictly (numbers kept exact,
// duplicate keys refused).
func readRecord(w http.ResponseWriter, r *http.Request) (any, recordBody, error) {
	var b recordBody
	if err := decodeBody(w, r, &b); err != nil {
		return nil, b, err
	}
	if len(b.Record) == 0 {
		return nil, b, invalidf(`body: want {"record": {...}}`)
	}
	v, err := pipeline.DecodeStrict(b.Record)
	if err != nil {
		return nil, b, invalidf("record: %s", shortJSONError(err))
	}
	return v, b, nil
}

func validateResponse(errs extracttype.ErrorList) map[string]any {
	if errs == nil {
		errs = extracttype.ErrorList{}
	}
	return map[string]any{"valid": len(errs) == 0, "errors": errs, "overridable": onlyGrounding(errs)}
}

// apiValidate validates a record for the item without saving it.
func (s *Server) apiValidate(w http.ResponseWriter, r *http.Request) error {
	id, err := itemID(r)
	if err != nil {
		return err
	}
	rec, _, err := readRecord(w, r)
	if err != nil {
		return err
	}
	it, err := s.loadItem(r.Context(), id)
	if err != nil {
		return err
	}
	errs, _ := it.validate(rec)
	writeJSON(w, http.StatusOK, validateResponse(errs))
	return nil
}

// apiApprove approves a record for the item; 422 with the error list
// when it does not validate.
func (s *Server) apiApprove(w http.ResponseWriter, r *http.Request) error {
	id, err := itemID(r)
	if err != nil {
		return err
	}
	rec, body, err := readRecord(w, r)
	if err != nil {
		return err
	}
	it, err := s.loadItem(r.Context(), id)
	if err != nil {
		return err
	}
	if it.Entry == nil {
		return fmt.Errorf("%w: schema %s is not configured here", ErrConflict, it.D.Item.SchemaID)
	}
	ap, err := s.approve(r.Context(), it, rec, nil, body.OverrideReason)
	if err != nil {
		return apiValidationError(err, it.D.Item.SchemaID)
	}
	writeJSON(w, http.StatusOK, map[string]any{"item_id": ap.ItemID, "message_id": ap.MessageID, "run_no": ap.RunNo,
		"status": store.TriageApproved, "decided_by": ap.DecidedBy, "decided_at": ap.DecidedAt})
	return nil
}

// apiValidationError rewords approve's *ValidationError, written for
// the item page, for API callers: the message says the record does not
// pass schema schemaID and lists the errors (or, when only grounding
// errors remain, says that override_reason is required, or how short the
// one sent is). Other errors are returned as they are.
func apiValidationError(err error, schemaID string) error {
	var ve *ValidationError
	if !errors.As(err, &ve) {
		return err
	}
	out := *ve
	switch {
	case ve.Overridable && ve.ReasonLen == 0:
		out.Msg = fmt.Sprintf("only grounding errors remain (%s); to approve anyway, send override_reason: "+
			"it is required for overriding grounding errors (at least %d characters)", errorSummary(ve.Errors, 5), MinOverrideReason)
	case ve.Overridable:
		out.Msg = fmt.Sprintf("only grounding errors remain (%s); override_reason is too short: %s given, at least %d needed",
			errorSummary(ve.Errors, 5), characters(ve.ReasonLen), MinOverrideReason)
	default:
		out.Msg = fmt.Sprintf("the record does not pass schema %s: %s", schemaID, errorSummary(ve.Errors, 5))
	}
	return &out
}

// errorSummary joins the first n errors as "path: message" with "; ",
// noting how many more there are. Error messages carry no customer
// values.
func errorSummary(errs extracttype.ErrorList, n int) string {
	lines := make([]string, 0, min(len(errs), n)+1)
	for i, e := range errs {
		if i == n {
			lines = append(lines, fmt.Sprintf("and %d more in errors", len(errs)-n))
			break
		}
		lines = append(lines, e.Error())
	}
	return strings.Join(lines, "; ")
}

// apiReject rejects the item: {"reason": "..."}.
func (s *Server) apiReject(w http.ResponseWriter, r *http.Request) error {
	id, err := itemID(r)
	if err != nil {
		return err
	}
	var b struct {
		Reason string `json:"reason"`
	}
	if err := decodeBody(w, r, &b); err != nil {
		return err
	}
	if err := s.reject(r.Context(), id, b.Reason); err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, map[string]any{"item_id": id, "status": store.TriageRejected})
	return nil
}

// apiRerun sends the item's message back for a new run: {"note": "..."}
// (optional).
func (s *Server) apiRerun(w http.ResponseWriter, r *http.Request) error {
	id, err := itemID(r)
	if err != nil {
		return err
	}
	var b struct {
		Note string `json:"note"`
	}
	if err := decodeBody(w, r, &b); err != nil {
		return err
	}
	run, published, err := s.rerun(r.Context(), id, b.Note)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, map[string]any{"item_id": id, "status": store.TriageRerun, "message_id": run.MessageID,
		"run_no": run.RunNo, "batch_id": run.BatchID, "dedup_id": run.DedupID, "published": published})
	return nil
}

// apiBulkCount returns how many items a bulk re-run of the filter takes:
// {"count", "filter"}. It takes and checks the filter as apiBulkRerun does
// (checkBulkFilter): a schema is required.
func (s *Server) apiBulkCount(w http.ResponseWriter, r *http.Request) error {
	ctx := r.Context()
	f, err := s.parseFilter(r.Context(), r.URL.Query())
	if err != nil {
		return err
	}
	if err := s.checkBulkFilter(f); err != nil {
		return err
	}
	me := reviewerFrom(ctx).Login
	n, err := s.st.TriageBulkRerunCount(ctx, s.st.Pool, f.Store(me, time.Now()), me)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, map[string]any{"count": n, "filter": f.Values()})
	return nil
}

// apiBulkRerun re-runs every open item of the query's filter:
// {"confirmed": N, "note": "..."}, N being the count the caller saw; 409
// when the count changed, 404 when no item matches the filter. The filter
// is checked, as for apiBulkCount, before the body.
func (s *Server) apiBulkRerun(w http.ResponseWriter, r *http.Request) error {
	f, err := s.parseFilter(r.Context(), r.URL.Query())
	if err != nil {
		return err
	}
	if err := s.checkBulkFilter(f); err != nil {
		return err
	}
	var b struct {
		Confirmed int    `json:"confirmed"`
		Note      string `json:"note"`
	}
	if err := decodeBody(w, r, &b); err != nil {
		return err
	}
	if err := s.checkConfirmed(r.Context(), f, b.Confirmed, `body: want {"confirmed": N} with N from GET /api/v1/rerun/count`); err != nil {
		return err
	}
	res, err := s.bulkRerun(r.Context(), f, b.Confirmed, b.Note)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, res)
	return nil
}

// apiResult returns a message's current result (by the store's message
// id): the latest validated record, the model's or a reviewer's, of the
// schema in ?schema= (default: the newest of any schema). A schema that is
// not configured here is refused (ErrInvalid, naming the configured ones);
// a message without a result of that schema is ErrNotFound.
func (s *Server) apiResult(w http.ResponseWriter, r *http.Request) error {
	id, err := strconv.ParseInt(r.PathValue("id"), 10, 64)
	if err != nil || id < 1 {
		return invalidf("message id %q is not a positive number", r.PathValue("id"))
	}
	schema := strings.TrimSpace(r.URL.Query().Get("schema"))
	if schema != "" && !contains(s.schemaIDs(), schema) {
		return invalidf("schema %s is not configured here: want one of %s", quoteValue(schema), strings.Join(s.schemaIDs(), ", "))
	}
	e, err := s.st.CurrentResultGet(r.Context(), s.st.Pool, store.CurrentResultGetParams{MessageID: id, SchemaID: schema})
	if errors.Is(err, store.ErrNotFound) {
		if schema != "" {
			return fmt.Errorf("%w: message %d has no result of schema %q", ErrNotFound, id, schema)
		}
		return fmt.Errorf("%w: message %d has no result", ErrNotFound, id)
	}
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, resultOf(e))
	return nil
}

// apiAudit lists audit entries, newest first: item_id, actor, limit
// (default 100, at most 1000). An item_id that is not an item's is a 400,
// as the audit log page's notice says (readAuditQuery).
func (s *Server) apiAudit(w http.ResponseWriter, r *http.Request) error {
	q := r.URL.Query()
	aq, err := s.parseAuditQuery(r.Context(), q, "item_id")
	if err != nil {
		return err
	}
	p := store.AuditListParams{TriageItemID: aq.ItemID, Actor: aq.Actor}
	if v := q.Get("limit"); v != "" {
		if p.Limit, err = strconv.Atoi(v); err != nil || p.Limit < 1 || p.Limit > 1000 {
			return invalidf("limit %q: want 1 to 1000", v)
		}
	}
	entries, err := s.st.AuditList(r.Context(), s.st.Pool, p)
	if err != nil {
		return err
	}
	if entries == nil {
		entries = []store.AuditEntry{}
	}
	writeJSON(w, http.StatusOK, map[string]any{"entries": entries})
	return nil
}

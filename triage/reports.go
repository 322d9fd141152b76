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

	"github.com/extractq/extractq/internal/since"
	"github.com/extractq/extractq/store"
)

// The report pages answer the analysts' questions the failure-analytics
// views were made for (migrations 000004, 000006 and 000007): which
// fields fail most, since when, in which batch, and does the one repair
// fix them; and where each batch stands.

// The query parameters of the report page and of the report API routes.
var (
	reportPageParams  = []string{"schema", "since", "batch"}
	reportFieldParams = []string{"schema", "since", "batch", "limit"}
	batchListParams   = []string{"schema", "limit"}
)

// Choices of the report form's window; any value since.Parse reads is
// accepted too.
var reportWindows = []struct{ Value, Label string }{
	{"", "all time"}, {"24h", "last 24 h"}, {"7d", "last 7 days"}, {"30d", "last 30 days"},
}

// reportQuery is a report's selection: a schema (empty: all), the start
// of its window (zero: all time) and a batch (empty: all).
type reportQuery struct {
	Schema string
	Since  string // as given
	From   time.Time
	Batch  string
	Limit  int
}

// parseReportQuery reads schema, since, batch and limit from q. An unknown
// schema or batch, a since that since.Parse refuses or a limit outside
// 1..maxLimit returns an ErrInvalid error naming the parameter and what it
// accepts. Other errors are the store's.
func (s *Server) parseReportQuery(ctx context.Context, q url.Values, defLimit, maxLimit int, now time.Time) (reportQuery, error) {
	rq, problems, err := s.readReportQuery(ctx, q, defLimit, maxLimit, now)
	if err != nil {
		return rq, err
	}
	if len(problems) > 0 {
		return rq, invalidf("%s", strings.Join(problems, "; "))
	}
	return rq, nil
}

// readReportQuery reads q as parseReportQuery does, but leaves out each
// value parseReportQuery would refuse and returns, for each, a line naming
// the parameter, the value and what is accepted. The error is the store's,
// looking up the batch.
func (s *Server) readReportQuery(ctx context.Context, q url.Values, defLimit, maxLimit int, now time.Time) (reportQuery, []string, error) {
	var problems []string
	rq := reportQuery{Schema: q.Get("schema"), Since: q.Get("since"), Batch: q.Get("batch"), Limit: defLimit}
	if rq.Schema != "" && !contains(s.schemaIDs(), rq.Schema) {
		problems = append(problems, fmt.Sprintf("schema %s is not configured here: want one of %s", quoteValue(rq.Schema), strings.Join(s.schemaIDs(), ", ")))
		rq.Schema = ""
	}
	var err error
	if rq.From, err = since.Parse(rq.Since, now); err != nil {
		problems = append(problems, err.Error())
		rq.Since = ""
	}
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > maxLimit {
			problems = append(problems, fmt.Sprintf("limit %s: want 1 to %d", quoteValue(v), maxLimit))
		} else {
			rq.Limit = n
		}
	}
	if rq.Batch != "" {
		_, err := s.st.BatchSummary(ctx, s.st.Pool, rq.Batch)
		switch {
		case errors.Is(err, store.ErrNotFound):
			problems = append(problems, fmt.Sprintf("batch %s: there is no such batch", quoteValue(rq.Batch)))
			rq.Batch = ""
		case err != nil:
			return rq, problems, err
		}
	}
	return rq, problems, nil
}

// reportsView is the reports page.
type reportsView struct {
	Query     reportQuery
	Notice    []string // what the page left out of its link (linkNotice)
	Schemas   []string
	Windows   []struct{ Value, Label string }
	Fields    []store.FailingField
	MaxErrors int
	Repairs   []store.RepairEffect
	Batches   []store.BatchRow
	Eval      *evalView
	QA        *qaView
}

// reportsPage shows the failing fields, the repair's effect per field and
// the newest batches. A link with a wrong value or an unknown parameter
// still shows the page, without that value, and a notice names what was
// left out (linkNotice).
func (s *Server) reportsPage(w http.ResponseWriter, r *http.Request) error {
	ctx := r.Context()
	v := &reportsView{Schemas: s.schemaIDs(), Windows: reportWindows}
	rq, problems, err := s.readReportQuery(ctx, linkQuery(r), 25, 200, time.Now())
	if err != nil {
		return err
	}
	v.Notice = linkNotice(r, "the reports page", reportPageParams, problems)
	v.Query = rq
	if v.Fields, err = s.st.FailingFieldList(ctx, s.st.Pool, store.FailingFieldListParams{SchemaID: rq.Schema, Since: rq.From, BatchID: rq.Batch, Limit: rq.Limit}); err != nil {
		return err
	}
	for _, f := range v.Fields {
		v.MaxErrors = max(v.MaxErrors, f.Errors)
	}
	if v.Repairs, err = s.st.RepairEffectList(ctx, s.st.Pool, store.RepairEffectListParams{SchemaID: rq.Schema, Since: rq.From, BatchID: rq.Batch, Limit: rq.Limit}); err != nil {
		return err
	}
	if v.Batches, err = s.st.BatchList(ctx, s.st.Pool, store.BatchListParams{SchemaID: rq.Schema, Limit: 20}); err != nil {
		return err
	}
	if v.Eval, err = s.evalSection(ctx, rq); err != nil {
		return err
	}
	if v.QA, err = s.qaSection(ctx, rq); err != nil {
		return err
	}
	return s.render(w, r, http.StatusOK, "reports", "Reports", v)
}

// apiFailingFields answers GET /api/v1/reports/failing-fields with
// {"since": time or null, "batch": id or null, "fields": [...]}, most
// errors first.
func (s *Server) apiFailingFields(w http.ResponseWriter, r *http.Request) error {
	rq, err := s.parseReportQuery(r.Context(), r.URL.Query(), 100, 1000, time.Now())
	if err != nil {
		return err
	}
	fields, err := s.st.FailingFieldList(r.Context(), s.st.Pool, store.FailingFieldListParams{SchemaID: rq.Schema, Since: rq.From, BatchID: rq.Batch, Limit: rq.Limit})
	if err != nil {
		return err
	}
	if fields == nil {
		fields = []store.FailingField{}
	}
	writeJSON(w, http.StatusOK, map[string]any{"since": timeOrNil(rq.From), "batch": stringOrNil(rq.Batch), "fields": fields})
	return nil
}

// apiRepairEffect answers GET /api/v1/reports/repair with
// {"since": time or null, "batch": id or null, "fields": [...]}, most
// flagged runs first.
func (s *Server) apiRepairEffect(w http.ResponseWriter, r *http.Request) error {
	rq, err := s.parseReportQuery(r.Context(), r.URL.Query(), 100, 1000, time.Now())
	if err != nil {
		return err
	}
	rows, err := s.st.RepairEffectList(r.Context(), s.st.Pool, store.RepairEffectListParams{SchemaID: rq.Schema, Since: rq.From, BatchID: rq.Batch, Limit: rq.Limit})
	if err != nil {
		return err
	}
	if rows == nil {
		rows = []store.RepairEffect{}
	}
	writeJSON(w, http.StatusOK, map[string]any{"since": timeOrNil(rq.From), "batch": stringOrNil(rq.Batch), "fields": rows})
	return nil
}

// apiBatches answers GET /api/v1/batches with {"batches": [...]}, newest
// first.
func (s *Server) apiBatches(w http.ResponseWriter, r *http.Request) error {
	rq, err := s.parseReportQuery(r.Context(), r.URL.Query(), 50, 500, time.Now())
	if err != nil {
		return err
	}
	rows, err := s.st.BatchList(r.Context(), s.st.Pool, store.BatchListParams{SchemaID: rq.Schema, Limit: rq.Limit})
	if err != nil {
		return err
	}
	if rows == nil {
		rows = []store.BatchRow{}
	}
	writeJSON(w, http.StatusOK, map[string]any{"batches": rows})
	return nil
}

// batchReport is GET /api/v1/batches/{id}: where the batch stands, what
// the repair did for it, and its triage items by status.
type batchReport struct {
	store.BatchSummary
	Done       bool                  `json:"done"`
	Accounting store.BatchAccounting `json:"accounting"`
	Triage     map[string]int        `json:"triage_items"`
}

// apiBatch answers GET /api/v1/batches/{id}; an unknown batch is a 404.
func (s *Server) apiBatch(w http.ResponseWriter, r *http.Request) error {
	ctx, id := r.Context(), r.PathValue("id")
	sum, err := s.st.BatchSummary(ctx, s.st.Pool, id)
	if errors.Is(err, store.ErrNotFound) {
		return fmt.Errorf("%w: there is no batch %s", ErrNotFound, quoteValue(id))
	}
	if err != nil {
		return err
	}
	acc, err := s.st.BatchAccountingGet(ctx, s.st.Pool, id)
	if err != nil {
		return err
	}
	tc, err := s.st.TriageQueueCounts(ctx, s.st.Pool, store.TriageFilter{BatchID: id, Status: store.TriageAnyStatus})
	if err != nil {
		return err
	}
	triage := map[string]int{}
	for _, st := range []string{store.TriageOpen, store.TriageApproved, store.TriageRejected, store.TriageRerun} {
		triage[st] = tc.ByStatus[st]
	}
	writeJSON(w, http.StatusOK, batchReport{BatchSummary: sum, Done: sum.Done(), Accounting: acc, Triage: triage})
	return nil
}

// stringOrNil is s, or nil for "" (JSON null: all).
func stringOrNil(s string) any {
	if s == "" {
		return nil
	}
	return s
}

// timeOrNil is t, or nil for the zero time (JSON null: all time).
func timeOrNil(t time.Time) any {
	if t.IsZero() {
		return nil
	}
	return t.UTC()
}

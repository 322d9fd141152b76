package triage

import (
	"context"
	"fmt"
	"net/http"

	"github.com/extractq/extractq/eval"
	"github.com/extractq/extractq/store"
)

// The reports page's QA section: the false-accept rate of each field per
// cohort, estimated from the reviewed QA samples (qa_field_estimates;
// docs/triage.md, "The QA queue"), weighted by the inverse of each
// sample's share, with its 95% Wilson interval on the effective sample
// size. Records made by the LLM simulator are labelled so: their errors
// are the simulator's.

// qaView is the QA section.
type qaView struct {
	Counts store.QACounts
	Rows   []qaRow
	// Simulated reports that some cohort shown is the simulator's.
	Simulated bool
}

// qaRow is one field of one cohort, formatted: the rate in percent with
// its interval, and the rate as a CSS width.
type qaRow struct {
	store.QAEstimate
	Rate      string
	RateWidth float64
	Simulated bool
	// First marks the first row of its cohort.
	First bool
}

func (s *Server) qaSection(ctx context.Context, rq reportQuery) (*qaView, error) {
	counts, err := s.st.QASampleCounts(ctx, s.st.Pool, rq.Schema)
	if err != nil {
		return nil, err
	}
	est, err := s.st.QAFieldEstimates(ctx, s.st.Pool, rq.Schema)
	if err != nil {
		return nil, err
	}
	v := &qaView{Counts: counts}
	var last string
	for _, e := range est {
		cohort := e.SchemaID + "\x00" + e.SchemaVersion + "\x00" + e.PromptVersion + "\x00" + e.Model
		row := qaRow{QAEstimate: e, Rate: qaRate(e), RateWidth: 100 * e.FalseAcceptRate, Simulated: eval.IsSimulator(e.Model), First: cohort != last}
		last = cohort
		v.Simulated = v.Simulated || row.Simulated
		v.Rows = append(v.Rows, row)
	}
	return v, nil
}

// qaRate formats e's rate and interval in percent, as "12.5 [3.1–38.0]".
func qaRate(e store.QAEstimate) string {
	return fmt.Sprintf("%.1f [%.1f–%.1f]", 100*e.FalseAcceptRate, 100*e.Low, 100*e.High)
}

// apiQAEstimates answers GET /api/v1/reports/qa with {"counts": {...},
// "estimates": [...]}: the rows of qa_field_estimates (schema= narrows
// them to one schema), each with "simulated" when the cohort's model is
// the LLM simulator.
func (s *Server) apiQAEstimates(w http.ResponseWriter, r *http.Request) error {
	schema := r.URL.Query().Get("schema")
	if schema != "" && !contains(s.schemaIDs(), schema) {
		return invalidf("schema %q is not configured", schema)
	}
	v, err := s.qaSection(r.Context(), reportQuery{Schema: schema})
	if err != nil {
		return err
	}
	type row struct {
		store.QAEstimate
		Simulated bool `json:"simulated"`
	}
	rows := make([]row, 0, len(v.Rows))
	for _, x := range v.Rows {
		rows = append(rows, row{x.QAEstimate, x.Simulated})
	}
	writeJSON(w, http.StatusOK, map[string]any{"counts": v.Counts, "estimates": rows})
	return nil
}

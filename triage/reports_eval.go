package triage

import (
	"context"
	"fmt"
	"sort"
	"strings"

	"github.com/extractq/extractq/store"
)

// The reports page's evaluation section: the scores cmd/eval recorded
// (eval_runs, eval_fields; docs/eval.md), the newest evaluation as a
// table, and per field a chart of F1 over the evaluations shown, oldest
// first, one bar per evaluation (its prompt, model and schema version),
// with its 95% interval. Figures of a batch run on the LLM simulator are
// labelled as simulator figures.

// evalRunsShown is how many evaluations the charts show.
const evalRunsShown = 12

// chartsPerRow is how many field charts share a row of the page.
const chartsPerRow = 4

// evalView is the evaluation section.
type evalView struct {
	Latest *store.EvalRun
	Rows   []evalRow       // the newest evaluation's fields
	Runs   []store.EvalRun // newest first
	Charts []evalChart
	// ChartRows are Charts, chartsPerRow to a row.
	ChartRows [][]evalChart
	// Simulated reports that some evaluation shown ran on the simulator.
	Simulated bool
}

// evalRow is one field of the newest evaluation, formatted: each score
// in percent with its 95% interval, "–" when undefined, and F1 as a CSS
// bar width (percent).
type evalRow struct {
	store.EvalField
	Precision, Recall, F1, Exact string
	F1Width                      float64
}

func pctOf(v, lo, hi *float64) string {
	if v == nil {
		return "–"
	}
	if lo == nil || hi == nil {
		return fmt.Sprintf("%.1f", 100**v)
	}
	return fmt.Sprintf("%.1f [%.1f–%.1f]", 100**v, 100**lo, 100**hi)
}

// evalChart is one field's server-rendered SVG: a bar per evaluation.
type evalChart struct {
	Field         string
	Width, Height int
	Bars          []evalBar
}

// evalBar is one evaluation's F1 of the field, in SVG coordinates (y
// grows downwards; the plot is 100 units high, from y 10 to 110).
type evalBar struct {
	X, W           int
	Y, H           float64 // the bar, from the F1 value down to 0
	LowY, HighY    float64 // the 95% interval's whisker
	HasInterval    bool
	Defined        bool
	Label, Value   string
	Title          string
	Simulated      bool
	LabelX, LabelY int
	ValueY         float64
}

func (s *Server) evalSection(ctx context.Context, rq reportQuery) (*evalView, error) {
	runs, err := s.st.EvalRunList(ctx, s.st.Pool, store.EvalRunListParams{SchemaID: rq.Schema, BatchID: rq.Batch, Limit: evalRunsShown})
	if err != nil {
		return nil, err
	}
	v := &evalView{Runs: runs}
	if len(runs) == 0 {
		return v, nil
	}
	v.Latest = &runs[0]
	for _, f := range v.Latest.Fields {
		row := evalRow{EvalField: f, Precision: pctOf(f.Precision, f.PrecisionLow, f.PrecisionHigh),
			Recall: pctOf(f.Recall, f.RecallLow, f.RecallHigh), F1: pctOf(f.F1, f.F1Low, f.F1High),
			Exact: pctOf(f.Exact, f.ExactLow, f.ExactHigh)}
		if f.F1 != nil {
			row.F1Width = 100 * *f.F1
		}
		v.Rows = append(v.Rows, row)
	}
	for _, r := range runs {
		v.Simulated = v.Simulated || r.Simulated
	}
	// one chart per field of the newest evaluation's schema, the
	// evaluations of that schema oldest first
	var same []store.EvalRun
	for i := len(runs) - 1; i >= 0; i-- {
		if runs[i].SchemaID == v.Latest.SchemaID {
			same = append(same, runs[i])
		}
	}
	const barW, gap = 28, 10
	for _, f := range v.Latest.Fields {
		c := evalChart{Field: f.Field, Height: 150}
		for i, r := range same {
			b := evalBar{X: 30 + i*(barW+gap), W: barW, Simulated: r.Simulated}
			b.Label = shortVersion(r)
			b.LabelX, b.LabelY = b.X+barW/2, 125
			b.Title = fmt.Sprintf("eval %d, batch %s, %s: ", r.ID, r.BatchID, versionText(r))
			if ef := fieldOf(r, f.Field); ef != nil && ef.F1 != nil {
				b.Defined = true
				b.Y, b.H = 110-100**ef.F1, 100**ef.F1
				b.Value = fmt.Sprintf("%.0f", 100**ef.F1)
				b.ValueY = b.Y - 2 // above the bar and its whisker
				b.Title += fmt.Sprintf("F1 %.1f%%", 100**ef.F1)
				if ef.F1Low != nil && ef.F1High != nil {
					b.HasInterval = true
					b.LowY, b.HighY = 110-100**ef.F1Low, 110-100**ef.F1High
					b.ValueY = min(b.ValueY, b.HighY-2)
					b.Title += fmt.Sprintf(" [%.1f–%.1f]", 100**ef.F1Low, 100**ef.F1High)
				}
				b.Title += fmt.Sprintf(", n %d", ef.N)
			} else {
				b.Value, b.ValueY = "–", 108
				b.Title += "F1 undefined (no expected or predicted value)"
			}
			if r.Simulated {
				b.Title += " (simulator figures, not a model)"
			}
			c.Bars = append(c.Bars, b)
		}
		c.Width = 30 + len(same)*(barW+gap) + 10
		v.Charts = append(v.Charts, c)
	}
	sort.SliceStable(v.Charts, func(i, j int) bool { return v.Charts[i].Field < v.Charts[j].Field })
	for i := 0; i < len(v.Charts); i += chartsPerRow {
		v.ChartRows = append(v.ChartRows, v.Charts[i:min(i+chartsPerRow, len(v.Charts))])
	}
	return v, nil
}

func fieldOf(r store.EvalRun, name string) *store.EvalField {
	for i := range r.Fields {
		if r.Fields[i].Field == name {
			return &r.Fields[i]
		}
	}
	return nil
}

func versionText(r store.EvalRun) string {
	return fmt.Sprintf("prompt %s, model %s, schema v%s", r.PromptVersion, r.Model, r.SchemaVersion)
}

// shortVersion is a bar's label: the prompt version's last part, cut.
func shortVersion(r store.EvalRun) string {
	p := r.PromptVersion
	if i := strings.LastIndexByte(p, '.'); i >= 0 && i < len(p)-1 {
		p = p[i+1:]
	}
	if len(p) > 6 {
		p = p[:6]
	}
	return p
}

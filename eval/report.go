package eval

import (
	"encoding/json"
	"math"
	"slices"
	"strings"
)

// SimulatorModel is the model name of the LLM simulator
// (devtools/llmsim.DefaultModel, the default llm.model): a batch whose
// calls name it, or a name starting with "extractq-sim", ran on the
// simulator, and its figures describe the simulator, not a model.
const SimulatorModel = "extractq-sim-1"

// SimulatorNote is what the figures of a batch run on the simulator
// describe, said wherever they are shown.
const SimulatorNote = "simulator figures: they describe the LLM simulator's heuristics and settings, not a model"

// IsSimulator reports whether model names the LLM simulator.
func IsSimulator(model string) bool {
	return model == SimulatorModel || strings.HasPrefix(model, "extractq-sim")
}

// Batch is what an evaluated batch ran with: from its runs' LLM calls
// (the calls of the deliveries that decided them).
type Batch struct {
	ID             string   `json:"batch_id"`
	SchemaID       string   `json:"schema_id"`
	SchemaVersions []string `json:"schema_versions"`
	PromptVersions []string `json:"prompt_versions"`
	Models         []string `json:"models"`
	// Simulated reports that every model is the simulator.
	Simulated bool `json:"simulated"`
}

// SetSimulated sets Simulated from Models.
func (b *Batch) SetSimulated() {
	b.Simulated = len(b.Models) > 0 && !slices.ContainsFunc(b.Models, func(m string) bool { return !IsSimulator(m) })
}

// Report is the evaluation of one batch.
type Report struct {
	Batch
	// Note says what the figures describe when they are the simulator's
	// (SimulatorNote).
	Note        string        `json:"note,omitempty"`
	Labels      int           `json:"labels"`    // label lines read
	Matched     int           `json:"matched"`   // label lines matched to a message of the batch
	NoRecord    int           `json:"no_record"` // matched messages without a model record
	RawLabels   bool          `json:"raw_labels"`
	NotInSchema []string      `json:"not_in_schema"`
	Fields      []FieldResult `json:"fields"`
	scored      *Scored
}

// FieldResult is one field's scores.
type FieldResult struct {
	Field    string `json:"field"`
	Grounded bool   `json:"grounded"`
	Counts
	Precision Metric `json:"precision"` // TP / (TP + FP), Wilson
	Recall    Metric `json:"recall"`    // TP / (TP + FN), Wilson
	F1        Metric `json:"f1"`        // bootstrap
	Exact     Metric `json:"exact"`     // (TP + TN) / N, Wilson
}

// NewReport summarises sc for batch b, a FieldResult per field with at
// least one labelled message, in field order.
func NewReport(b Batch, sc *Scored, opt Options) *Report {
	r := &Report{Batch: b, Labels: sc.Labels, Matched: sc.Matched, NoRecord: sc.NoRecord,
		RawLabels: opt.RawLabels, NotInSchema: sc.NotInSchema, scored: sc}
	if b.Simulated {
		r.Note = SimulatorNote
	}
	if r.NotInSchema == nil {
		r.NotInSchema = []string{}
	}
	for j, f := range sc.Fields {
		outs := column(sc, j, nil)
		var c Counts
		for _, o := range outs {
			c.add(o)
		}
		if c.N == 0 {
			continue
		}
		r.Fields = append(r.Fields, FieldResult{
			Field: f.Name, Grounded: f.Grounded, Counts: c,
			Precision: Wilson(c.TP, c.TP+c.FP),
			Recall:    Wilson(c.TP, c.TP+c.FN),
			F1:        f1Bootstrap(outs),
			Exact:     Wilson(c.Exact(), c.N),
		})
	}
	return r
}

// column returns field j's labelled outcomes, of the rows keep allows
// (every row when keep is nil).
func column(sc *Scored, j int, keep func(i int) bool) []Outcome {
	var out []Outcome
	for i, row := range sc.Outcomes {
		if row[j] != Unlabelled && (keep == nil || keep(i)) {
			out = append(out, row[j])
		}
	}
	return out
}

// MarshalJSON writes {"value","low","high"}, or null when undefined.
func (m Metric) MarshalJSON() ([]byte, error) {
	if !m.Defined {
		return []byte("null"), nil
	}
	round := func(x float64) any {
		if math.IsNaN(x) {
			return nil
		}
		return math.Round(x*1e4) / 1e4
	}
	return json.Marshal(map[string]any{"value": round(m.Value), "low": round(m.Low), "high": round(m.High)})
}

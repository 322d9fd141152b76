package eval

import (
	"context"
	"math"
	"strings"

	"github.com/extractq/extractq/store"
)

// LoadBatch reads the batch's messages (each one's latest run in the
// batch and that run's model record) and what it ran with, through st.
// An unknown batch returns an error wrapping store.ErrNotFound.
func LoadBatch(ctx context.Context, st *store.Store, db store.DBTX, batchID string) (Batch, []Prediction, error) {
	v, err := st.EvalBatchVersions(ctx, db, batchID)
	if err != nil {
		return Batch{}, nil, err
	}
	recs, err := st.EvalBatchRecords(ctx, db, batchID)
	if err != nil {
		return Batch{}, nil, err
	}
	b := BatchOf(batchID, v)
	preds := make([]Prediction, len(recs))
	for i, r := range recs {
		preds[i] = Prediction{ExternalID: r.ExternalID, Source: r.Source, Status: r.Status, Record: r.Record, Text: r.Text}
	}
	return b, preds, nil
}

// BatchOf returns batch batchID as it ran with v
// (store.EvalBatchVersions), Simulated set.
func BatchOf(batchID string, v store.EvalVersions) Batch {
	b := Batch{ID: batchID, SchemaID: v.SchemaID, SchemaVersions: v.SchemaVersions, PromptVersions: v.PromptVersions, Models: v.Models}
	b.SetSimulated()
	return b
}

// SaveParams name the labels an evaluation used.
type SaveParams struct {
	LabelsName   string // the labels file's base name
	LabelsSHA256 string // hex SHA-256 of its bytes
}

// Save records r through st (an eval_runs row and an eval_fields row per
// field: counts and scores only) and returns its id.
func Save(ctx context.Context, st *store.Store, db store.DBTX, r *Report, p SaveParams) (int64, error) {
	fields := make([]store.EvalField, len(r.Fields))
	for i, f := range r.Fields {
		ef := store.EvalField{Field: f.Field, Grounded: f.Grounded, N: f.N, TP: f.TP, FP: f.FP, FN: f.FN, TN: f.TN, Wrong: f.Wrong}
		ef.Precision, ef.PrecisionLow, ef.PrecisionHigh = f.Precision.ptrs()
		ef.Recall, ef.RecallLow, ef.RecallHigh = f.Recall.ptrs()
		ef.F1, ef.F1Low, ef.F1High = f.F1.ptrs()
		ef.Exact, ef.ExactLow, ef.ExactHigh = f.Exact.ptrs()
		fields[i] = ef
	}
	return st.EvalRunInsert(ctx, db, store.EvalRunInsertParams{
		BatchID: r.ID, SchemaID: r.SchemaID, SchemaVersion: strings.Join(r.SchemaVersions, ","),
		PromptVersion: strings.Join(r.PromptVersions, ","), Model: strings.Join(r.Models, ","), Simulated: r.Simulated,
		LabelsName: p.LabelsName, LabelsSHA256: p.LabelsSHA256, RawLabels: r.RawLabels,
		Labels: r.Labels, Matched: r.Matched, NoRecord: r.NoRecord, Fields: fields,
	})
}

func (m Metric) ptrs() (*float64, *float64, *float64) {
	if !m.Defined {
		return nil, nil, nil
	}
	p := func(x float64) *float64 {
		if math.IsNaN(x) {
			return nil
		}
		return &x
	}
	return p(m.Value), p(m.Low), p(m.High)
}

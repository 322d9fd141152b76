package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// pgForeignKeyViolation is Postgres's foreign_key_violation.
const pgForeignKeyViolation = "23503"

// EvalRecord is one message of a batch as an evaluation reads it: its
// latest run in the batch and that run's own model record.
type EvalRecord struct {
	ExternalID string `db:"external_id"`
	Source     string `db:"source"`
	RunNo      int    `db:"run_no"`
	Status     string `db:"status"`
	// Record is the validated record the model made for that run
	// (outcome succeeded or repaired); nil for a failed or queued run, or
	// one whose record a reviewer made.
	Record json.RawMessage `db:"record"`
	// Text is the message text; "" once erased.
	Text string `db:"body"`
}

const evalBatchRecordsSQL = `
WITH latest AS (
    SELECT DISTINCT ON (r.message_id) r.message_id, r.run_no, r.status
    FROM runs r
    WHERE r.batch_id = $1
    ORDER BY r.message_id, r.run_no DESC
)
SELECT m.external_id, m.source, l.run_no, l.status,
       (SELECT e.data FROM extractions e
        WHERE e.message_id = l.message_id AND e.run_no = l.run_no
          AND e.outcome IN ('succeeded', 'repaired') AND e.created_by = 'model') AS record,
       CASE WHEN m.erased_at IS NULL THEN m.body ELSE '' END AS body
FROM latest l
JOIN messages m ON m.id = l.message_id
ORDER BY l.message_id`

// EvalBatchRecords returns every message of the batch with its latest run
// in the batch and that run's model record, by message id. Unlike
// BatchResultList it reads the run's own record, never a later batch's
// or a reviewer's, so two batches over the same messages (two versions)
// are scored on what each made.
func (s *Store) EvalBatchRecords(ctx context.Context, db DBTX, batchID string) ([]EvalRecord, error) {
	rows, err := db.Query(ctx, evalBatchRecordsSQL, batchID)
	if err != nil {
		return nil, fmt.Errorf("store.EvalBatchRecords(%q): %w", batchID, interpretError(err))
	}
	out, err := pgx.CollectRows(rows, pgx.RowToStructByName[EvalRecord])
	if err != nil {
		return nil, fmt.Errorf("store.EvalBatchRecords(%q): %w", batchID, interpretError(err))
	}
	return out, nil
}

// EvalVersions is what a batch ran with: the distinct values, sorted, of
// the LLM calls that decided its runs (superseded calls left out).
type EvalVersions struct {
	SchemaID       string   `db:"schema_id"`
	Models         []string `db:"models"`
	PromptVersions []string `db:"prompt_versions"`
	SchemaVersions []string `db:"schema_versions"`
}

const evalBatchVersionsSQL = `
SELECT b.schema_id,
       coalesce(array_agg(DISTINCT c.model ORDER BY c.model) FILTER (WHERE c.model IS NOT NULL), '{}') AS models,
       coalesce(array_agg(DISTINCT c.prompt_version ORDER BY c.prompt_version) FILTER (WHERE c.prompt_version IS NOT NULL), '{}') AS prompt_versions,
       coalesce(array_agg(DISTINCT c.schema_version ORDER BY c.schema_version) FILTER (WHERE c.schema_version IS NOT NULL), '{}') AS schema_versions
FROM batches b
LEFT JOIN runs r ON r.batch_id = b.id
LEFT JOIN llm_calls c ON c.message_id = r.message_id AND c.run_no = r.run_no AND NOT c.superseded
WHERE b.id = $1
GROUP BY b.schema_id`

// EvalBatchVersions returns what the batch's calls ran with. An unknown
// batch returns an error wrapping ErrNotFound.
func (s *Store) EvalBatchVersions(ctx context.Context, db DBTX, batchID string) (EvalVersions, error) {
	rows, err := db.Query(ctx, evalBatchVersionsSQL, batchID)
	if err != nil {
		return EvalVersions{}, fmt.Errorf("store.EvalBatchVersions(%q): %w", batchID, interpretError(err))
	}
	v, err := pgx.CollectExactlyOneRow(rows, pgx.RowToStructByName[EvalVersions])
	if err != nil {
		return EvalVersions{}, fmt.Errorf("store.EvalBatchVersions(%q): %w", batchID, interpretError(err))
	}
	return v, nil
}

// EvalField is one scored field of an evaluation: counts, and each score
// with its 95% interval (nil when its denominator is 0). Fractions in
// [0, 1].
type EvalField struct {
	Field         string   `db:"field" json:"field"`
	Grounded      bool     `db:"grounded" json:"grounded"`
	N             int      `db:"n" json:"n"`
	TP            int      `db:"tp" json:"tp"`
	FP            int      `db:"fp" json:"fp"`
	FN            int      `db:"fn" json:"fn"`
	TN            int      `db:"tn" json:"tn"`
	Wrong         int      `db:"wrong" json:"wrong"`
	Precision     *float64 `db:"precision" json:"precision"`
	PrecisionLow  *float64 `db:"precision_low" json:"precision_low"`
	PrecisionHigh *float64 `db:"precision_high" json:"precision_high"`
	Recall        *float64 `db:"recall" json:"recall"`
	RecallLow     *float64 `db:"recall_low" json:"recall_low"`
	RecallHigh    *float64 `db:"recall_high" json:"recall_high"`
	F1            *float64 `db:"f1" json:"f1"`
	F1Low         *float64 `db:"f1_low" json:"f1_low"`
	F1High        *float64 `db:"f1_high" json:"f1_high"`
	Exact         *float64 `db:"exact" json:"exact"`
	ExactLow      *float64 `db:"exact_low" json:"exact_low"`
	ExactHigh     *float64 `db:"exact_high" json:"exact_high"`
}

// EvalRunInsertParams is one evaluation to record.
type EvalRunInsertParams struct {
	BatchID       string // required
	SchemaID      string // required
	SchemaVersion string // comma-separated when several
	PromptVersion string
	Model         string
	Simulated     bool
	LabelsName    string // the labels file's base name
	LabelsSHA256  string // hex
	RawLabels     bool
	Labels        int
	Matched       int
	NoRecord      int
	Fields        []EvalField
}

const evalRunInsertSQL = `
INSERT INTO eval_runs (batch_id, schema_id, schema_version, prompt_version, model, simulated,
                       labels_name, labels_sha256, raw_labels, labels, matched, no_record)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12)
RETURNING id`

const evalFieldInsertSQL = `
INSERT INTO eval_fields (eval_run_id, field, grounded, n, tp, fp, fn, tn, wrong,
                         precision, precision_low, precision_high, recall, recall_low, recall_high,
                         f1, f1_low, f1_high, exact, exact_low, exact_high)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17, $18, $19, $20, $21)`

// EvalRunInsert records an evaluation and its fields in one transaction
// (inside db's, when db is one) and returns its id. An unknown batch
// returns an error wrapping ErrNotFound; a field named twice, ErrConflict.
func (s *Store) EvalRunInsert(ctx context.Context, db DBTX, p EvalRunInsertParams) (int64, error) {
	if p.BatchID == "" || p.SchemaID == "" {
		return 0, fmt.Errorf("store.EvalRunInsert(%q): batch id and schema id are required", p.BatchID)
	}
	var id int64
	err := inTx(ctx, db, func(tx DBTX) error {
		if err := tx.QueryRow(ctx, evalRunInsertSQL, p.BatchID, p.SchemaID, p.SchemaVersion, p.PromptVersion, p.Model,
			p.Simulated, CleanText(p.LabelsName), p.LabelsSHA256, p.RawLabels, p.Labels, p.Matched, p.NoRecord).Scan(&id); err != nil {
			return err
		}
		for _, f := range p.Fields {
			if _, err := tx.Exec(ctx, evalFieldInsertSQL, id, f.Field, f.Grounded, f.N, f.TP, f.FP, f.FN, f.TN, f.Wrong,
				f.Precision, f.PrecisionLow, f.PrecisionHigh, f.Recall, f.RecallLow, f.RecallHigh,
				f.F1, f.F1Low, f.F1High, f.Exact, f.ExactLow, f.ExactHigh); err != nil {
				return err
			}
		}
		return nil
	})
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == pgForeignKeyViolation {
		return 0, fmt.Errorf("store.EvalRunInsert(%q): no such batch: %w", p.BatchID, ErrNotFound)
	}
	if err != nil {
		return 0, fmt.Errorf("store.EvalRunInsert(%q): %w", p.BatchID, interpretError(err))
	}
	return id, nil
}

// EvalRun is a recorded evaluation with its fields.
type EvalRun struct {
	ID            int64       `db:"id" json:"id"`
	CreatedAt     time.Time   `db:"created_at" json:"created_at"`
	BatchID       string      `db:"batch_id" json:"batch_id"`
	SchemaID      string      `db:"schema_id" json:"schema_id"`
	SchemaVersion string      `db:"schema_version" json:"schema_version"`
	PromptVersion string      `db:"prompt_version" json:"prompt_version"`
	Model         string      `db:"model" json:"model"`
	Simulated     bool        `db:"simulated" json:"simulated"`
	LabelsName    string      `db:"labels_name" json:"labels_name"`
	RawLabels     bool        `db:"raw_labels" json:"raw_labels"`
	Labels        int         `db:"labels" json:"labels"`
	Matched       int         `db:"matched" json:"matched"`
	NoRecord      int         `db:"no_record" json:"no_record"`
	Fields        []EvalField `db:"fields" json:"fields"`
}

// EvalRunListParams selects recorded evaluations.
type EvalRunListParams struct {
	SchemaID string // "" for every schema
	BatchID  string // "" for every batch
	Limit    int    // default 20
}

const evalRunListSQL = `
SELECT r.id, r.created_at, r.batch_id, r.schema_id, r.schema_version, r.prompt_version, r.model,
       r.simulated, r.labels_name, r.raw_labels, r.labels, r.matched, r.no_record,
       coalesce((SELECT jsonb_agg(to_jsonb(f) - 'eval_run_id' ORDER BY f.field)
                 FROM eval_fields f WHERE f.eval_run_id = r.id), '[]') AS fields
FROM eval_runs r
WHERE ($1 = '' OR r.schema_id = $1) AND ($2 = '' OR r.batch_id = $2)
ORDER BY r.created_at DESC, r.id DESC
LIMIT $3`

// EvalRunList returns recorded evaluations, newest first, each with its
// fields by name.
func (s *Store) EvalRunList(ctx context.Context, db DBTX, p EvalRunListParams) ([]EvalRun, error) {
	rows, err := db.Query(ctx, evalRunListSQL, p.SchemaID, p.BatchID, limitOr(p.Limit, 20))
	if err != nil {
		return nil, fmt.Errorf("store.EvalRunList: %w", interpretError(err))
	}
	out, err := pgx.CollectRows(rows, pgx.RowToStructByName[EvalRun])
	if err != nil {
		return nil, fmt.Errorf("store.EvalRunList: %w", interpretError(err))
	}
	return out, nil
}

package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
)

// QA sampling of successes (migration 000023; docs/triage.md, "The QA
// queue"). A share of the runs whose record passed validation is drawn
// when the outcome commits, in the outcome's transaction: the sample row
// is written by the statement after the outcome's, and only if the run's
// model record is there, so a run is sampled exactly when its success
// commits. The draw is the worker's (deterministic per run); the stratum
// and its share are read in SQL from the committed record, so whichever
// delivery commits the run, the sample agrees with the stored record, and
// the run's unique key makes a second write a no-op. Reviewers mark each
// field of a sample right or wrong (QASampleReview); qa_field_estimates
// turns the verdicts into a false-accept rate per field and cohort
// (QAFieldEstimates).

// QA sample statuses (qa_samples.status).
const (
	QAOpen     = "open"     // waiting for a reviewer
	QAReviewed = "reviewed" // every field has a verdict
	QAErased   = "erased"   // closed unreviewed: the message was erased
)

// AuditQAReview is the audited action of a QA review.
const AuditQAReview = "qa_review"

// QAFieldRecord is the field name qa_field_estimates gives the whole
// record: some field of it is wrong.
const QAFieldRecord = "(record)"

// ErrQAReviewed is returned for a QA sample already reviewed or closed.
var ErrQAReviewed = errors.New("QA sample is not open")

// ErrQAClaimed means another reviewer's claim on a QA sample holds.
var ErrQAClaimed = errors.New("QA sample is claimed by another reviewer")

// QASampleParams asks RunOutcomeInsert (and RunWriteBatch) to draw the
// run for QA when its success commits: the run is sampled when Draw is
// below its stratum's share. The stratum is the committed record's value
// at StratifyBy, as text ("" for null or absent, or with no StratifyBy);
// its share is Strata[stratum], else Share. Only succeeded and repaired
// runs are drawn; QA is ignored for others.
type QASampleParams struct {
	Draw       float64            // the run's draw, in [0, 1)
	Share      float64            // in [0, 1]
	StratifyBy string             // a JSON Pointer (RFC 6901) or ""
	Strata     map[string]float64 // per-stratum shares, each in [0, 1]
}

// qaSampleInsertSQL draws the run ($1, $2) for QA if its model record is
// stored: $3 is StratifyBy, $4 its path as text[], $5 Strata as a JSON
// object, $6 Share, $7 Draw. The cohort is the run's deciding call's (the
// last of its calls not superseded).
const qaSampleInsertSQL = `
INSERT INTO qa_samples (message_id, run_no, schema_id, schema_version, prompt_version, model,
                        stratify_by, stratum, share, draw)
SELECT e.message_id, e.run_no, e.schema_id, e.schema_version,
       coalesce(c.prompt_version, ''), coalesce(c.model, ''), $3, st.stratum, sh.share, $7
FROM extractions e
CROSS JOIN LATERAL (SELECT CASE WHEN $3 = '' THEN '' ELSE coalesce(e.data #>> $4::text[], '') END AS stratum) st
CROSS JOIN LATERAL (SELECT coalesce(($5::jsonb ->> st.stratum)::float8, $6::float8) AS share) sh
LEFT JOIN LATERAL (
    SELECT l.prompt_version, l.model FROM llm_calls l
    WHERE l.message_id = e.message_id AND l.run_no = e.run_no AND NOT l.superseded
    ORDER BY l.attempt DESC LIMIT 1) c ON true
WHERE e.message_id = $1 AND e.run_no = $2 AND e.created_by = 'model'
  AND e.outcome IN ('succeeded', 'repaired') AND $7::float8 < sh.share
ON CONFLICT (message_id, run_no) DO NOTHING`

// validate checks q; nil is valid.
func (q *QASampleParams) validate() error {
	if q == nil {
		return nil
	}
	if !(q.Draw >= 0 && q.Draw < 1) {
		return fmt.Errorf("qa draw %v is not in [0, 1)", q.Draw)
	}
	if !(q.Share >= 0 && q.Share <= 1) {
		return fmt.Errorf("qa share %v is not in [0, 1]", q.Share)
	}
	for k, v := range q.Strata {
		if !(v >= 0 && v <= 1) {
			return fmt.Errorf("qa share %v of stratum %q is not in [0, 1]", v, k)
		}
	}
	if q.StratifyBy != "" && !strings.HasPrefix(q.StratifyBy, "/") {
		return fmt.Errorf("qa stratify_by %q is not a JSON Pointer", q.StratifyBy)
	}
	return nil
}

// pointerPath returns the reference tokens of JSON Pointer p (RFC 6901
// section 4: ~1 is /, ~0 is ~), as Postgres' #>> takes them.
func pointerPath(p string) []string {
	if p == "" {
		return []string{}
	}
	toks := strings.Split(p[1:], "/")
	for i, t := range toks {
		toks[i] = strings.ReplaceAll(strings.ReplaceAll(t, "~1", "/"), "~0", "~")
	}
	return toks
}

// qaSampleArgs returns qaSampleInsertSQL's arguments for p, or nil when p
// draws nothing: no QA, not a success, or a draw no stratum's share is
// above (most runs, so most outcomes cost no statement more).
func qaSampleArgs(p RunOutcomeParams) []any {
	q := p.QA
	if q == nil || (p.Status != RunSucceeded && p.Status != RunRepaired) {
		return nil
	}
	most := q.Share
	for _, v := range q.Strata {
		most = max(most, v)
	}
	if q.Draw >= most {
		return nil
	}
	strata := q.Strata
	if strata == nil {
		strata = map[string]float64{}
	}
	sj, _ := json.Marshal(strata) // a map of floats in [0, 1] always encodes
	return []any{p.MessageID, p.RunNo, q.StratifyBy, pointerPath(q.StratifyBy), string(sj), q.Share, q.Draw}
}

// qaSampleInsert draws p's run for QA, on db (the outcome's transaction).
func qaSampleInsert(ctx context.Context, db DBTX, p RunOutcomeParams) error {
	args := qaSampleArgs(p)
	if args == nil {
		return nil
	}
	if _, err := db.Exec(ctx, qaSampleInsertSQL, args...); err != nil {
		return fmt.Errorf("qa sample: %w", err)
	}
	return nil
}

// qaQueue queues on b the QA draws of the outcomes at idx (each after
// every outcome statement, so its run's record is there), and returns how
// many it queued: read them with qaResults.
func qaQueue(b *pgx.Batch, outcomes []RunOutcomeParams, idx []int) int {
	n := 0
	for _, i := range idx {
		if args := qaSampleArgs(outcomes[i]); args != nil {
			b.Queue(qaSampleInsertSQL, args...)
			n++
		}
	}
	return n
}

// qaResults reads the results of n statements qaQueue queued.
func qaResults(br pgx.BatchResults, n int) error {
	for range n {
		if _, err := br.Exec(); err != nil {
			return err
		}
	}
	return nil
}

// QASample is one sampled run as the QA queue lists it.
type QASample struct {
	ID            int64      `db:"id" json:"id"`
	MessageID     int64      `db:"message_id" json:"message_id"`
	RunNo         int        `db:"run_no" json:"run_no"`
	SchemaID      string     `db:"schema_id" json:"schema_id"`
	SchemaVersion string     `db:"schema_version" json:"schema_version"`
	PromptVersion string     `db:"prompt_version" json:"prompt_version"`
	Model         string     `db:"model" json:"model"`
	StratifyBy    string     `db:"stratify_by" json:"stratify_by"`
	Stratum       string     `db:"stratum" json:"stratum"` // a customer value
	Share         float64    `db:"share" json:"share"`
	Status        string     `db:"status" json:"status"`
	ClaimedBy     *string    `db:"claimed_by" json:"claimed_by"`
	ClaimExpires  *time.Time `db:"claim_expires" json:"claim_expires"`
	ReviewedBy    *string    `db:"reviewed_by" json:"reviewed_by"`
	ReviewedAt    *time.Time `db:"reviewed_at" json:"reviewed_at"`
	CreatedAt     time.Time  `db:"created_at" json:"created_at"`
	BatchID       string     `db:"batch_id" json:"batch_id"`
	Source        string     `db:"source" json:"source"`
	ExternalID    string     `db:"external_id" json:"external_id"`
}

const qaSampleColumns = `s.id, s.message_id, s.run_no, s.schema_id, s.schema_version, s.prompt_version, s.model,
       s.stratify_by, s.stratum, s.share, s.status, s.claimed_by, s.claim_expires, s.reviewed_by,
       s.reviewed_at, s.created_at, r.batch_id, m.source, m.external_id`

const qaSampleFrom = `
FROM qa_samples s
JOIN runs r ON r.message_id = s.message_id AND r.run_no = s.run_no
JOIN messages m ON m.id = s.message_id`

// QASampleListParams selects QA samples.
type QASampleListParams struct {
	SchemaID string // "" for every schema
	Status   string // QAOpen, QAReviewed, QAErased; "" for any
	Limit    int    // default 100
}

// QASampleList returns the samples p selects, oldest first.
func (s *Store) QASampleList(ctx context.Context, db DBTX, p QASampleListParams) ([]QASample, error) {
	limit := p.Limit
	if limit <= 0 {
		limit = 100
	}
	rows, err := db.Query(ctx, `SELECT `+qaSampleColumns+qaSampleFrom+`
WHERE ($1 = '' OR s.schema_id = $1) AND ($2 = '' OR s.status = $2)
ORDER BY s.created_at, s.id LIMIT $3`, p.SchemaID, p.Status, limit)
	if err != nil {
		return nil, fmt.Errorf("store.QASampleList: %w", err)
	}
	out, err := pgx.CollectRows(rows, pgx.RowToStructByName[QASample])
	if err != nil {
		return nil, fmt.Errorf("store.QASampleList: %w", err)
	}
	return out, nil
}

// QACounts counts QA samples by status.
type QACounts struct {
	Open     int `json:"open"`
	Reviewed int `json:"reviewed"`
	Erased   int `json:"erased"`
}

// QASampleCounts counts the samples of schemaID ("" for every schema).
func (s *Store) QASampleCounts(ctx context.Context, db DBTX, schemaID string) (QACounts, error) {
	var c QACounts
	err := db.QueryRow(ctx, `
SELECT count(*) FILTER (WHERE status = 'open'), count(*) FILTER (WHERE status = 'reviewed'),
       count(*) FILTER (WHERE status = 'erased')
FROM qa_samples WHERE $1 = '' OR schema_id = $1`, schemaID).Scan(&c.Open, &c.Reviewed, &c.Erased)
	if err != nil {
		return c, fmt.Errorf("store.QASampleCounts: %w", err)
	}
	return c, nil
}

// QASampleClaimNextParams asks for the next open QA sample.
type QASampleClaimNextParams struct {
	Reviewer string        // required
	SchemaID string        // "" for any schema
	Lease    time.Duration // default DefaultLease
}

// QASampleClaimNext claims the oldest open sample no other reviewer holds
// (the reviewer's own claim first), FOR UPDATE SKIP LOCKED so two
// reviewers never get one sample, and returns its id; ErrNotFound when
// none is left.
func (s *Store) QASampleClaimNext(ctx context.Context, db DBTX, p QASampleClaimNextParams) (int64, error) {
	if p.Reviewer == "" {
		return 0, fmt.Errorf("store.QASampleClaimNext: reviewer is required")
	}
	var id int64
	err := db.QueryRow(ctx, `
WITH next AS (
    SELECT s.id FROM qa_samples s
    WHERE s.status = 'open' AND ($2 = '' OR s.schema_id = $2)
      AND (s.claimed_by IS NULL OR s.claim_expires <= now() OR s.claimed_by = $1)
    ORDER BY (s.claimed_by = $1 AND s.claim_expires > now()) IS TRUE DESC, s.created_at, s.id
    LIMIT 1
    FOR UPDATE OF s SKIP LOCKED
)
UPDATE qa_samples s SET claimed_by = $1, claim_expires = now() + $3 * interval '1 microsecond'
FROM next WHERE s.id = next.id
RETURNING s.id`, CleanText(p.Reviewer), p.SchemaID, leaseOr(p.Lease).Microseconds()).Scan(&id)
	if err != nil {
		return 0, fmt.Errorf("store.QASampleClaimNext: %w", interpretError(err))
	}
	return id, nil
}

// QAVerdict is a reviewer's verdict on one field of a sample.
type QAVerdict struct {
	Path    string `json:"path"`    // the field's JSON Pointer, such as "/order_id"
	Correct bool   `json:"correct"` // the record's value is right
	// Fixed is the right value, as JSON, when Correct is false (null
	// when the value should be absent); nil when Correct.
	Fixed json.RawMessage `json:"fixed,omitempty"`
}

// QASampleDetail is a sample with what a reviewer sees: the message
// text, the record under review and its evidence, and any verdicts.
type QASampleDetail struct {
	QASample
	Text     string          `json:"text"`
	Record   json.RawMessage `json:"record"`   // nil once erased
	Evidence json.RawMessage `json:"evidence"` // grounding evidence, a JSON array
	Verdicts []QAVerdict     `json:"verdicts"`
}

// QASampleGet returns sample id with its message and record; ErrNotFound
// when there is none.
func (s *Store) QASampleGet(ctx context.Context, db DBTX, id int64) (QASampleDetail, error) {
	var d QASampleDetail
	rows, err := db.Query(ctx, `SELECT `+qaSampleColumns+`, m.body AS text, e.data AS record,
       coalesce(e.evidence, '[]'::jsonb) AS evidence`+qaSampleFrom+`
LEFT JOIN extractions e ON e.message_id = s.message_id AND e.run_no = s.run_no
WHERE s.id = $1`, id)
	if err != nil {
		return d, fmt.Errorf("store.QASampleGet(%d): %w", id, err)
	}
	type row struct {
		QASample
		Text     string          `db:"text"`
		Record   json.RawMessage `db:"record"`
		Evidence json.RawMessage `db:"evidence"`
	}
	r, err := pgx.CollectExactlyOneRow(rows, pgx.RowToStructByName[row])
	if err != nil {
		return d, fmt.Errorf("store.QASampleGet(%d): %w", id, interpretError(err))
	}
	d = QASampleDetail{QASample: r.QASample, Text: r.Text, Record: r.Record, Evidence: r.Evidence}
	vrows, err := db.Query(ctx, `SELECT path, correct, fixed FROM qa_verdicts WHERE sample_id = $1 ORDER BY path`, id)
	if err != nil {
		return d, fmt.Errorf("store.QASampleGet(%d): %w", id, err)
	}
	d.Verdicts, err = pgx.CollectRows(vrows, func(row pgx.CollectableRow) (QAVerdict, error) {
		var v QAVerdict
		err := row.Scan(&v.Path, &v.Correct, &v.Fixed)
		return v, err
	})
	if err != nil {
		return d, fmt.Errorf("store.QASampleGet(%d): %w", id, err)
	}
	return d, nil
}

// QASampleReviewParams is a reviewer's review of a whole sample.
type QASampleReviewParams struct {
	ID       int64
	Reviewer string      // required
	Via      string      // required: ViaUI, ViaAPI or ViaCLI
	Verdicts []QAVerdict // one per field, at least one; paths distinct
}

// QASampleReview stores the verdicts of an open sample, marks it
// reviewed and audits it, in one transaction. It returns ErrNotFound for
// no such sample, ErrQAReviewed for one not open, ErrQAClaimed when another
// reviewer's claim on it holds, and a params error (no verdicts, a path
// twice or not a JSON Pointer, a fix that is not JSON) before writing.
func (s *Store) QASampleReview(ctx context.Context, db DBTX, p QASampleReviewParams) error {
	fail := func(err error) error { return fmt.Errorf("store.QASampleReview(%d): %w", p.ID, err) }
	if p.Reviewer == "" || p.Via == "" || len(p.Verdicts) == 0 {
		return fail(errors.New("reviewer, via and at least one verdict are required"))
	}
	paths := make([]string, len(p.Verdicts))
	correct := make([]bool, len(p.Verdicts))
	fixed := make([]*string, len(p.Verdicts))
	seen := map[string]bool{}
	wrong := []string{}
	for i, v := range p.Verdicts {
		if !strings.HasPrefix(v.Path, "/") || seen[v.Path] {
			return fail(fmt.Errorf("verdict %d: path %q is not a JSON Pointer or is given twice", i, v.Path))
		}
		seen[v.Path] = true
		paths[i], correct[i] = v.Path, v.Correct
		if !v.Correct {
			wrong = append(wrong, v.Path)
			f := CleanJSON(v.Fixed)
			if len(f) == 0 {
				f = json.RawMessage(`null`)
			}
			if !json.Valid(f) {
				return fail(fmt.Errorf("verdict %d (%s): the fix is not JSON", i, v.Path))
			}
			fs := string(f)
			fixed[i] = &fs
		}
	}
	return inTx(ctx, db, func(tx DBTX) error {
		var status string
		var claimedBy *string
		var claimLive bool
		var msgID int64
		var runNo int
		err := tx.QueryRow(ctx, `SELECT status, claimed_by, coalesce(claim_expires > now(), false), message_id, run_no
FROM qa_samples WHERE id = $1 FOR UPDATE`, p.ID).Scan(&status, &claimedBy, &claimLive, &msgID, &runNo)
		if err != nil {
			return fail(interpretError(err))
		}
		switch {
		case status != QAOpen:
			return fail(ErrQAReviewed)
		case claimLive && claimedBy != nil && *claimedBy != p.Reviewer:
			return fail(ErrQAClaimed)
		}
		if _, err := tx.Exec(ctx, `
INSERT INTO qa_verdicts (sample_id, path, correct, fixed)
SELECT $1, v.path, v.correct, v.fixed FROM unnest($2::text[], $3::bool[], $4::jsonb[]) AS v(path, correct, fixed)`,
			p.ID, paths, correct, fixed); err != nil {
			return fail(err)
		}
		if _, err := tx.Exec(ctx, `
UPDATE qa_samples SET status = 'reviewed', reviewed_by = $2, reviewed_at = now(), claimed_by = NULL, claim_expires = NULL
WHERE id = $1`, p.ID, CleanText(p.Reviewer)); err != nil {
			return fail(err)
		}
		// The audit entry names the wrong fields, not their values.
		return auditInsert(ctx, tx, AuditInsertParams{Actor: p.Reviewer, Via: p.Via, Action: AuditQAReview,
			MessageID: msgID, RunNo: runNo, After: map[string]any{"qa_sample": p.ID, "fields": len(paths), "wrong": wrong}})
	})
}

// QAEstimate is one row of qa_field_estimates: a field's estimated
// false-accept rate in one cohort, from the reviewed samples, weighted by
// the inverse of each sample's share, with its 95% Wilson interval on the
// effective sample size (see migration 000023 for the formula and its
// sources). Field is the field's JSON Pointer, or QAFieldRecord.
type QAEstimate struct {
	SchemaID        string  `db:"schema_id" json:"schema_id"`
	SchemaVersion   string  `db:"schema_version" json:"schema_version"`
	PromptVersion   string  `db:"prompt_version" json:"prompt_version"`
	Model           string  `db:"model" json:"model"`
	Field           string  `db:"field" json:"field"`
	Reviewed        int     `db:"reviewed" json:"reviewed"` // samples with a verdict on the field
	Wrong           int     `db:"wrong" json:"wrong"`       // of them, marked wrong
	FalseAcceptRate float64 `db:"false_accept_rate" json:"false_accept_rate"`
	EffectiveN      float64 `db:"effective_n" json:"effective_n"`
	Low             float64 `db:"low" json:"low"`
	High            float64 `db:"high" json:"high"`
}

// QAFieldEstimates returns the rows of qa_field_estimates of schemaID (""
// for every schema), by cohort, the whole record first, then by field.
func (s *Store) QAFieldEstimates(ctx context.Context, db DBTX, schemaID string) ([]QAEstimate, error) {
	rows, err := db.Query(ctx, `
SELECT schema_id, schema_version, prompt_version, model, field, reviewed, wrong,
       false_accept_rate::float8 AS false_accept_rate, effective_n::float8 AS effective_n,
       low::float8 AS low, high::float8 AS high
FROM qa_field_estimates WHERE $1 = '' OR schema_id = $1
ORDER BY schema_id, schema_version, prompt_version, model, field <> '`+QAFieldRecord+`', field`, schemaID)
	if err != nil {
		return nil, fmt.Errorf("store.QAFieldEstimates: %w", err)
	}
	out, err := pgx.CollectRows(rows, pgx.RowToStructByName[QAEstimate])
	if err != nil {
		return nil, fmt.Errorf("store.QAFieldEstimates: %w", err)
	}
	return out, nil
}

// QALabel is a reviewed sample as eval reads it: the message's key and
// text, the record reviewed, and the verdicts on its fields.
type QALabel struct {
	SampleID   int64
	BatchID    string
	Source     string
	ExternalID string
	Text       string
	Record     json.RawMessage
	Verdicts   []QAVerdict
}

// QALabels returns the reviewed samples of the runs of batchID whose
// record is still stored (an erased message's is not), oldest first.
func (s *Store) QALabels(ctx context.Context, db DBTX, batchID string) ([]QALabel, error) {
	rows, err := db.Query(ctx, `
SELECT s.id, r.batch_id, m.source, m.external_id, m.body, e.data,
       coalesce((SELECT jsonb_agg(jsonb_build_object('path', v.path, 'correct', v.correct, 'fixed', v.fixed) ORDER BY v.path)
                 FROM qa_verdicts v WHERE v.sample_id = s.id), '[]')
FROM qa_samples s
JOIN runs r ON r.message_id = s.message_id AND r.run_no = s.run_no
JOIN messages m ON m.id = s.message_id
JOIN extractions e ON e.message_id = s.message_id AND e.run_no = s.run_no
WHERE r.batch_id = $1 AND s.status = 'reviewed'
ORDER BY s.created_at, s.id`, batchID)
	if err != nil {
		return nil, fmt.Errorf("store.QALabels(%q): %w", batchID, err)
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (QALabel, error) {
		var l QALabel
		var vs []byte
		if err := row.Scan(&l.SampleID, &l.BatchID, &l.Source, &l.ExternalID, &l.Text, &l.Record, &vs); err != nil {
			return l, err
		}
		return l, json.Unmarshal(vs, &l.Verdicts)
	})
	if err != nil {
		return nil, fmt.Errorf("store.QALabels(%q): %w", batchID, err)
	}
	return out, nil
}

// eraseQASQL erases the QA copies of the messages $1, as Erasure
// describes: each sample's stratum (a value of the record) is emptied and
// an open sample is closed as erased; each verdict's fix becomes NULL.
// Whether a field was right stays: it holds no value, and keeps the
// estimates whole.
const eraseQASQL = `
WITH v AS (
    UPDATE qa_verdicts SET fixed = NULL
    WHERE fixed IS NOT NULL AND sample_id IN (SELECT id FROM qa_samples WHERE message_id = ANY($1))
)
UPDATE qa_samples SET stratum = '', claimed_by = NULL, claim_expires = NULL,
       status = CASE WHEN status = 'open' THEN 'erased' ELSE status END
WHERE message_id = ANY($1)`

package store

import (
	"cmp"
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/extractq/extractq/extracttype"
)

// TriageAnyStatus in TriageFilter.Status selects items in every status.
const TriageAnyStatus = "any"

// TriageFilter selects triage items: for the queue, a claim of the next
// item, or a bulk re-run. The zero value selects every open item.
type TriageFilter struct {
	// Status is TriageOpen (the default), TriageApproved, TriageRejected,
	// TriageRerun or TriageAnyStatus.
	Status string `json:"status,omitempty"`
	// SchemaID keeps one schema's items.
	SchemaID string `json:"schema_id,omitempty"`
	// Kind keeps items with an error of this kind (such as "rule").
	Kind string `json:"kind,omitempty"`
	// Path keeps items with an error at this JSON Pointer, or at a path
	// whose array indices folded to * equal it ("/items/*/sku"); "/" also
	// matches errors about the whole record (path ""). With Kind, one error
	// must match both.
	Path string `json:"path,omitempty"`
	// BatchID keeps the items of runs of this batch.
	BatchID string `json:"batch_id,omitempty"`
	// NewerThan keeps items created at or after it; zero means no bound.
	NewerThan time.Time `json:"newer_than,omitzero"`
	// OlderThan keeps items created before it; zero means no bound.
	OlderThan time.Time `json:"older_than,omitzero"`
	// ClaimedBy keeps items under a live lease of this reviewer.
	ClaimedBy string `json:"claimed_by,omitempty"`
	// PromptVersion, SchemaVersion and Model keep the items of one
	// cohort (DESIGN.md, "Words"): those whose run's last LLM call
	// (lastCallSQL) has this prompt version (such as "extract.v1"),
	// schema version or model. An item whose run made no call has none.
	PromptVersion string `json:"prompt_version,omitempty"`
	SchemaVersion string `json:"schema_version,omitempty"`
	Model         string `json:"model,omitempty"`
	// Search keeps items whose message text matches this search query
	// (triage_search.go); it is customer text, so no log or audit entry
	// holds it.
	Search string `json:"-"`
}

// sqlArgs numbers the arguments of a query built piece by piece.
type sqlArgs struct{ args []any }

func (a *sqlArgs) add(v any) string {
	a.args = append(a.args, v)
	return "$" + strconv.Itoa(len(a.args))
}

// triageFrom joins a triage item (t) to its run (r) and message (m).
const triageFrom = `
FROM triage_items t
JOIN runs r ON r.message_id = t.message_id AND r.run_no = t.run_no
JOIN messages m ON m.id = t.message_id`

// foldIndicesSQL folds the array indices of a JSON Pointer to *, as
// extracttype.Error.PathPattern does.
const foldIndicesSQL = `regexp_replace(e->>'path', '/[0-9]+(?=/|$)', '/*', 'g')`

// lastCallSQL selects column %s of the last LLM call of the run of
// triage item t: the last attempt of the delivery that decided the run
// (superseded calls only when it has no other), the empty string when it made none.
const lastCallSQL = `coalesce((SELECT c.%s FROM llm_calls c WHERE c.message_id = t.message_id AND c.run_no = t.run_no
 ORDER BY c.superseded, c.attempt DESC, c.id DESC LIMIT 1), '')`

// lastCallJoin joins lc, the last LLM call of the run of triage item t
// as lastCallSQL picks it (its prompt_version, schema_version and model;
// NULL when the run made none): one lookup per item for all three.
const lastCallJoin = `
LEFT JOIN LATERAL (SELECT c.prompt_version, c.schema_version, c.model FROM llm_calls c
    WHERE c.message_id = t.message_id AND c.run_no = t.run_no
    ORDER BY c.superseded, c.attempt DESC, c.id DESC LIMIT 1) lc ON true`

// cohortColumns are the llm_calls columns of a cohort, in the order of
// TriageCohorts' lists.
var cohortColumns = [3]string{"prompt_version", "schema_version", "model"}

// lastCall returns lastCallSQL for column col.
func lastCall(col string) string { return fmt.Sprintf(lastCallSQL, col) }

// where returns the filter's conditions on t, r and m, adding its
// arguments to a.
func (f TriageFilter) where(a *sqlArgs) string {
	var conds []string
	if st := cmp.Or(f.Status, TriageOpen); st != TriageAnyStatus {
		conds = append(conds, "t.status = "+a.add(st))
	}
	if f.SchemaID != "" {
		conds = append(conds, "t.schema_id = "+a.add(f.SchemaID))
	}
	if f.Kind != "" || f.Path != "" {
		var ec []string
		if f.Kind != "" {
			ec = append(ec, "e->>'kind' = "+a.add(f.Kind))
		}
		if f.Path != "" {
			p := a.add(f.Path)
			// "/" also names the whole record (path ""), as the facets show it.
			ec = append(ec, "(e->>'path' = "+p+" OR "+foldIndicesSQL+" = "+p+" OR ("+p+" = '/' AND e->>'path' = ''))")
		}
		conds = append(conds, "EXISTS (SELECT 1 FROM jsonb_array_elements(t.errors) e WHERE "+strings.Join(ec, " AND ")+")")
	}
	if f.BatchID != "" {
		conds = append(conds, "r.batch_id = "+a.add(f.BatchID))
	}
	for i, v := range [3]string{f.PromptVersion, f.SchemaVersion, f.Model} {
		if v != "" {
			conds = append(conds, lastCall(cohortColumns[i])+" = "+a.add(v))
		}
	}
	if !f.NewerThan.IsZero() {
		conds = append(conds, "t.created_at >= "+a.add(f.NewerThan))
	}
	if !f.OlderThan.IsZero() {
		conds = append(conds, "t.created_at < "+a.add(f.OlderThan))
	}
	if f.ClaimedBy != "" {
		conds = append(conds, "(t.claimed_by = "+a.add(f.ClaimedBy)+" AND t.claim_expires > now())")
	}
	if c := f.searchCond(a); c != "" {
		conds = append(conds, c)
	}
	if len(conds) == 0 {
		return "true"
	}
	return strings.Join(conds, " AND ")
}

// validate names a status the table cannot hold.
func (f TriageFilter) validate() error {
	switch cmp.Or(f.Status, TriageOpen) {
	case TriageOpen, TriageApproved, TriageRejected, TriageRerun, TriageAnyStatus:
		return nil
	}
	return fmt.Errorf("status %q is not open, approved, rejected, rerun or any", f.Status)
}

// TriageQueueItem is a triage item as the queue lists it.
type TriageQueueItem struct {
	ID         int64                 `db:"id"`
	MessageID  int64                 `db:"message_id"`
	Source     string                `db:"source"`
	ExternalID string                `db:"external_id"` // the message's own id
	RunNo      int                   `db:"run_no"`
	BatchID    string                `db:"batch_id"` // the failed run's batch
	SchemaID   string                `db:"schema_id"`
	Status     string                `db:"status"` // TriageOpen, TriageApproved, TriageRejected or TriageRerun
	Reason     string                `db:"reason"` // the kind that failed the run
	Errors     extracttype.ErrorList `db:"errors"` // the run's final error list
	// Snippet is the message's first 200 characters.
	Snippet string `db:"snippet"`
	// ClaimedBy is the login holding a live lease on the item, or "".
	ClaimedBy string `db:"claimed_by"`
	// ClaimExpires is when that lease ends; nil without a live lease.
	ClaimExpires *time.Time `db:"claim_expires"`
	// DecidedBy and DecidedAt say who closed the item, and when.
	DecidedBy string     `db:"decided_by"`
	DecidedAt *time.Time `db:"decided_at"`
	// DecisionReason is a rejection's reason, a grounding override's
	// reason, or a re-run's note.
	DecisionReason string `db:"decision_reason"`
	// RerunNo is the run a re-run started; nil otherwise.
	RerunNo   *int      `db:"rerun_no"`
	CreatedAt time.Time `db:"created_at"`
	UpdatedAt time.Time `db:"updated_at"`
}

// triageQueueColumns are TriageQueueItem's columns over triageFrom.
const triageQueueColumns = `
SELECT t.id, t.message_id, m.source, m.external_id, t.run_no, r.batch_id, t.schema_id, t.status,
       t.reason, t.errors, left(m.body, 200) AS snippet,
       coalesce(CASE WHEN t.claim_expires > now() THEN t.claimed_by END, '') AS claimed_by,
       CASE WHEN t.claim_expires > now() THEN t.claim_expires END AS claim_expires,
       coalesce(t.decided_by, '') AS decided_by, t.decided_at, t.decision_reason, t.rerun_no,
       t.created_at, t.updated_at`

// TriageQueueListParams selects a page of the queue.
type TriageQueueListParams struct {
	Filter TriageFilter
	// NewestFirst orders by creation time descending; the default is
	// oldest first.
	NewestFirst bool
	// Limit is the most rows returned. Default 50.
	Limit int
	// Offset skips rows of the ordered list.
	Offset int
}

// TriageQueueList returns the items matching the filter, oldest first
// unless NewestFirst.
func (s *Store) TriageQueueList(ctx context.Context, db DBTX, p TriageQueueListParams) ([]TriageQueueItem, error) {
	if err := p.Filter.validate(); err != nil {
		return nil, fmt.Errorf("store.TriageQueueList: %w", err)
	}
	var a sqlArgs
	order := "t.created_at, t.id"
	if p.NewestFirst {
		order = "t.created_at DESC, t.id DESC"
	}
	q := triageQueueColumns + triageFrom + "\nWHERE " + p.Filter.where(&a) +
		"\nORDER BY " + order + "\nLIMIT " + a.add(limitOr(p.Limit, 50)) + " OFFSET " + a.add(max(0, p.Offset))
	rows, err := db.Query(ctx, q, a.args...)
	if err != nil {
		return nil, fmt.Errorf("store.TriageQueueList: %w", err)
	}
	out, err := pgx.CollectRows(rows, pgx.RowToStructByName[TriageQueueItem])
	if err != nil {
		return nil, fmt.Errorf("store.TriageQueueList: %w", err)
	}
	return out, nil
}

// TriageFacet is one value of a queue facet and how many matching items
// have it.
type TriageFacet struct {
	Value string `json:"value"`
	Count int    `json:"count"`
}

// TriageCounts are the counts the queue shows beside its list.
type TriageCounts struct {
	// Total is how many items match the filter.
	Total int `json:"total"`
	// Claimed is how many of them are under a live lease.
	Claimed int `json:"claimed"`
	// ByStatus counts the items matching the filter in every status.
	ByStatus map[string]int `json:"by_status"`
	// Kinds, Paths (array indices folded to *, the whole record as "/"),
	// Schemas and Batches count the matching items by error kind, error
	// path, schema and batch, most first (at most 12 each).
	Kinds   []TriageFacet `json:"kinds"`
	Paths   []TriageFacet `json:"paths"`
	Schemas []TriageFacet `json:"schemas"`
	Batches []TriageFacet `json:"batches"`
	// PromptVersions, SchemaVersions and Models count them by the cohort
	// of their run's last LLM call (TriageFilter.PromptVersion), most
	// first (at most 12 each); items whose run made no call are not
	// counted here.
	PromptVersions []TriageFacet `json:"prompt_versions"`
	SchemaVersions []TriageFacet `json:"schema_versions"`
	Models         []TriageFacet `json:"models"`
}

const facetSQL = `(SELECT coalesce(jsonb_agg(jsonb_build_object('value', x.value, 'count', x.count) ORDER BY x.count DESC, x.value), '[]')
 FROM (SELECT %s AS value, count(DISTINCT f.id) AS count FROM f %s GROUP BY 1 ORDER BY 2 DESC, 1 LIMIT 12) x)`

// TriageQueueCounts returns the counts of the items matching f.
func (s *Store) TriageQueueCounts(ctx context.Context, db DBTX, f TriageFilter) (TriageCounts, error) {
	if err := f.validate(); err != nil {
		return TriageCounts{}, fmt.Errorf("store.TriageQueueCounts: %w", err)
	}
	var a sqlArgs
	lateral := ", jsonb_array_elements(f.errors) e"
	q := `WITH f AS (SELECT t.id, t.schema_id, r.batch_id, t.errors, t.claim_expires,
    coalesce(lc.prompt_version, '') AS prompt_version, coalesce(lc.schema_version, '') AS schema_version,
    coalesce(lc.model, '') AS model` + triageFrom + lastCallJoin +
		"\nWHERE " + f.where(&a) + `)
SELECT (SELECT count(*) FROM f), (SELECT count(*) FROM f WHERE claim_expires > now()),
` + fmt.Sprintf(facetSQL, "e->>'kind'", lateral) + `,
` + fmt.Sprintf(facetSQL, "coalesce(nullif("+foldIndicesSQL+", ''), '/')", lateral) + `,
` + fmt.Sprintf(facetSQL, "f.schema_id", "") + `,
` + fmt.Sprintf(facetSQL, "f.batch_id", "") + `,
` + fmt.Sprintf(facetSQL, "f.prompt_version", "WHERE f.prompt_version <> ''") + `,
` + fmt.Sprintf(facetSQL, "f.schema_version", "WHERE f.schema_version <> ''") + `,
` + fmt.Sprintf(facetSQL, "f.model", "WHERE f.model <> ''")
	var c TriageCounts
	err := db.QueryRow(ctx, q, a.args...).Scan(&c.Total, &c.Claimed, &c.Kinds, &c.Paths, &c.Schemas, &c.Batches,
		&c.PromptVersions, &c.SchemaVersions, &c.Models)
	if err != nil {
		return c, fmt.Errorf("store.TriageQueueCounts: %w", err)
	}

	all := f
	all.Status = TriageAnyStatus
	var b sqlArgs
	rows, err := db.Query(ctx, `SELECT t.status, count(*)`+triageFrom+"\nWHERE "+all.where(&b)+"\nGROUP BY t.status", b.args...)
	if err != nil {
		return c, fmt.Errorf("store.TriageQueueCounts: by status: %w", err)
	}
	c.ByStatus = map[string]int{TriageOpen: 0, TriageApproved: 0, TriageRejected: 0, TriageRerun: 0}
	var st string
	var n int
	_, err = pgx.ForEachRow(rows, []any{&st, &n}, func() error { c.ByStatus[st] = n; return nil })
	if err != nil {
		return c, fmt.Errorf("store.TriageQueueCounts: by status: %w", err)
	}
	return c, nil
}

// TriageQueueNeighbors returns the ids of the items before and after item
// id in the queue order (oldest first) among the items matching f; 0 where
// there is none. The item itself need not match f.
func (s *Store) TriageQueueNeighbors(ctx context.Context, db DBTX, f TriageFilter, id int64) (prev, next int64, err error) {
	if err := f.validate(); err != nil {
		return 0, 0, fmt.Errorf("store.TriageQueueNeighbors(%d): %w", id, err)
	}
	var a sqlArgs
	idArg := a.add(id)
	w := f.where(&a)
	q := `WITH c AS (SELECT created_at, id FROM triage_items WHERE id = ` + idArg + `)
SELECT coalesce((SELECT t.id` + triageFrom + `, c WHERE ` + w + ` AND (t.created_at, t.id) < (c.created_at, c.id)
                 ORDER BY t.created_at DESC, t.id DESC LIMIT 1), 0),
       coalesce((SELECT t.id` + triageFrom + `, c WHERE ` + w + ` AND (t.created_at, t.id) > (c.created_at, c.id)
                 ORDER BY t.created_at, t.id LIMIT 1), 0)`
	if err := db.QueryRow(ctx, q, a.args...).Scan(&prev, &next); err != nil {
		return 0, 0, fmt.Errorf("store.TriageQueueNeighbors(%d): %w", id, err)
	}
	return prev, next, nil
}

// TriageQueueVersion returns a token that changes whenever the queue
// does: an item added, claimed, released, decided, or a lease run out.
// Pollers compare it to decide whether to refresh.
func (s *Store) TriageQueueVersion(ctx context.Context, db DBTX) (string, error) {
	var open, leased, maxID int64
	var updated time.Time
	err := db.QueryRow(ctx, `
SELECT count(*) FILTER (WHERE status = 'open'),
       count(*) FILTER (WHERE status = 'open' AND claim_expires > now()),
       coalesce(max(id), 0), coalesce(max(updated_at), 'epoch'::timestamptz)
FROM triage_items`).Scan(&open, &leased, &maxID, &updated)
	if err != nil {
		return "", fmt.Errorf("store.TriageQueueVersion: %w", err)
	}
	return fmt.Sprintf("%d.%d.%d.%d", open, leased, maxID, updated.UnixMicro()), nil
}

// TriageCohorts are the cohort values of the triage items' runs, each
// list sorted: the values the queue filter's prompt_version,
// schema_version and model may take.
type TriageCohorts struct {
	PromptVersions []string
	SchemaVersions []string
	Models         []string
}

// TriageCohortValues returns the distinct cohort values of the last LLM
// call of every triage item's run, in any status (empty values left out).
func (s *Store) TriageCohortValues(ctx context.Context, db DBTX) (TriageCohorts, error) {
	var c TriageCohorts
	q := `SELECT coalesce(array_agg(DISTINCT lc.prompt_version ORDER BY lc.prompt_version) FILTER (WHERE lc.prompt_version <> ''), '{}'),
       coalesce(array_agg(DISTINCT lc.schema_version ORDER BY lc.schema_version) FILTER (WHERE lc.schema_version <> ''), '{}'),
       coalesce(array_agg(DISTINCT lc.model ORDER BY lc.model) FILTER (WHERE lc.model <> ''), '{}')
FROM triage_items t` + lastCallJoin
	if err := db.QueryRow(ctx, q).Scan(&c.PromptVersions, &c.SchemaVersions, &c.Models); err != nil {
		return c, fmt.Errorf("store.TriageCohortValues: %w", err)
	}
	return c, nil
}

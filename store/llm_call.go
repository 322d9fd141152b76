package store

import (
	"context"
	"fmt"
)

// LLMCallInsertSupersededParams are the answered calls of a delivery
// that does not decide its run: the worker naks the run (a provider
// failure after them, or a shutdown), or another delivery committed the
// outcome first, so no outcome transaction writes them.
type LLMCallInsertSupersededParams struct {
	MessageID     int64
	RunNo         int
	SchemaID      string // required; a call's empty SchemaID takes it
	SchemaVersion string // required; a call's empty SchemaVersion takes it
	Calls         []LLMCall
}

// llmCallSupersededSQL writes the calls $3.. (the arrays of callArrays) of
// run ($1, $2) as superseded, whatever the run's status: they were paid.
// The text they copy (reply, stripped, patch) is left out when the
// message has been erased meanwhile (another delivery finished the run
// and an erasure followed), so that an erasure stays whole. It returns the
// rows written.
const llmCallSupersededSQL = `
INSERT INTO llm_calls (
    message_id, run_no, attempt, purpose, model, prompt_version, schema_id, schema_version,
    request_mode, repair_strategy, prompt_tokens, completion_tokens, cost_usd, price_version,
    latency_ms, finish_reason, reply, stripped, valid, error_count, patch,
    cached_tokens, usage_estimated, http_status, reply_bytes, superseded)
SELECT r.message_id, r.run_no, u.attempt, u.purpose, u.model, u.prompt_version, u.schema_id,
       u.schema_version, u.request_mode, u.repair_strategy, u.prompt_tokens, u.completion_tokens,
       u.cost_usd, u.price_version, u.latency_ms, u.finish_reason,
       CASE WHEN m.erased_at IS NULL THEN u.reply ELSE '' END,
       CASE WHEN m.erased_at IS NULL THEN u.stripped ELSE '' END,
       u.valid, u.error_count,
       CASE WHEN m.erased_at IS NULL THEN u.patch END,
       u.cached_tokens, u.usage_estimated, u.http_status, u.reply_bytes, true
FROM runs r
JOIN messages m ON m.id = r.message_id
CROSS JOIN unnest($3::int[], $4::text[], $5::text[], $6::text[], $7::text[], $8::text[],
    $9::text[], $10::text[], $11::int[], $12::int[], $13::float8[], $14::text[], $15::int[],
    $16::text[], $17::text[], $18::text[], $19::bool[], $20::int[], $21::jsonb[],
    $22::int[], $23::bool[], $24::int[], $25::int[])
    AS u(attempt, purpose, model, prompt_version, schema_id, schema_version, request_mode,
         repair_strategy, prompt_tokens, completion_tokens, cost_usd, price_version, latency_ms,
         finish_reason, reply, stripped, valid, error_count, patch,
         cached_tokens, usage_estimated, http_status, reply_bytes)
WHERE r.message_id = $1 AND r.run_no = $2`

// LLMCallInsertSuperseded writes the answered calls of a delivery that
// does not decide its run, marked superseded (llm_calls.superseded): they
// count in the ledger's calls, tokens and cost, but not as the run's own
// calls, which are those its outcome writes (RunOutcomeInsert). It writes
// no failure events. The calls are written whatever the run's status (a
// delivery that ran beside the one that finished the run was paid too),
// in one statement; nothing is written for no calls. An unknown run
// returns an error wrapping ErrNotFound. db may be the pool or a
// transaction.
//
// Text taken from replies is cleaned as RunOutcomeInsert cleans it, and
// left out when the message has been erased.
func (s *Store) LLMCallInsertSuperseded(ctx context.Context, db DBTX, p LLMCallInsertSupersededParams) error {
	if len(p.Calls) == 0 {
		return nil
	}
	if p.SchemaID == "" || p.SchemaVersion == "" {
		return fmt.Errorf("store.LLMCallInsertSuperseded(%d, %d): schema id and schema version are required", p.MessageID, p.RunNo)
	}
	arrays, err := callArrays(p.Calls, p.SchemaID, p.SchemaVersion)
	if err != nil {
		return fmt.Errorf("store.LLMCallInsertSuperseded(%d, %d): %w", p.MessageID, p.RunNo, err)
	}
	tag, err := db.Exec(ctx, llmCallSupersededSQL, append([]any{p.MessageID, p.RunNo}, arrays...)...)
	if err != nil {
		return fmt.Errorf("store.LLMCallInsertSuperseded(%d, %d): %w", p.MessageID, p.RunNo, interpretError(err))
	}
	if tag.RowsAffected() == 0 {
		return fmt.Errorf("store.LLMCallInsertSuperseded(%d, %d): no such run: %w", p.MessageID, p.RunNo, ErrNotFound)
	}
	return nil
}

package store

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
)

// outcomeWriteSQL writes one run's whole outcome in one statement: the
// run's status change and, only if the run was still queued (fin), its
// calls, its extraction or triage item, and its failure events, linked to
// their call by the call's attempt (unique within a run). It returns how
// many runs it finished: 1, or 0 when the run already had an outcome.
const outcomeWriteSQL = `
WITH fin AS (
    UPDATE runs
    SET status = $3, finished_at = now(), published_at = coalesce(published_at, now())
    WHERE message_id = $1 AND run_no = $2 AND status = 'queued'
    RETURNING message_id, run_no, batch_id
), calls AS (
    INSERT INTO llm_calls (
        message_id, run_no, attempt, purpose, model, prompt_version, schema_id, schema_version,
        request_mode, repair_strategy, prompt_tokens, completion_tokens, cost_usd, price_version,
        latency_ms, finish_reason, reply, stripped, valid, error_count, patch,
        cached_tokens, usage_estimated, http_status, reply_bytes)
    SELECT fin.message_id, fin.run_no, u.attempt, u.purpose, u.model, u.prompt_version, u.schema_id,
           u.schema_version, u.request_mode, u.repair_strategy, u.prompt_tokens, u.completion_tokens,
           u.cost_usd, u.price_version, u.latency_ms, u.finish_reason, u.reply, u.stripped, u.valid,
           u.error_count, u.patch, u.cached_tokens, u.usage_estimated, u.http_status, u.reply_bytes
    FROM fin CROSS JOIN unnest($4::int[], $5::text[], $6::text[], $7::text[], $8::text[], $9::text[],
        $10::text[], $11::text[], $12::int[], $13::int[], $14::numeric[], $15::text[], $16::int[],
        $17::text[], $18::text[], $19::text[], $20::bool[], $21::int[], $22::jsonb[],
        $43::int[], $44::bool[], $45::int[], $46::int[])
        AS u(attempt, purpose, model, prompt_version, schema_id, schema_version, request_mode,
             repair_strategy, prompt_tokens, completion_tokens, cost_usd, price_version, latency_ms,
             finish_reason, reply, stripped, valid, error_count, patch,
             cached_tokens, usage_estimated, http_status, reply_bytes)
    RETURNING id, attempt
), ext AS (
    INSERT INTO extractions (message_id, run_no, schema_id, schema_version, outcome, data, evidence, created_by)
    SELECT message_id, run_no, $23, $24, $25, $26::jsonb, $27::jsonb, $28
    FROM fin WHERE $26::jsonb IS NOT NULL
), tri AS (
    INSERT INTO triage_items (message_id, run_no, schema_id, reason, errors, last_reply,
        held_record, held_evidence, held_valid_as)
    SELECT message_id, run_no, $23, $29::text, $30::jsonb, $31, $47::jsonb, $48::jsonb, $49::text
    FROM fin WHERE $29::text IS NOT NULL
), fe AS (
    INSERT INTO failure_events (
        llm_call_id, message_id, run_no, attempt, schema_id, schema_version, prompt_version,
        model, kind, path, path_pattern, keyword, message)
    SELECT c.id, fin.message_id, fin.run_no, f.attempt, f.schema_id, f.schema_version, f.prompt_version,
           f.model, f.kind, f.path, f.path_pattern, f.keyword, f.message
    FROM fin
    CROSS JOIN unnest($32::int[], $33::int[], $34::text[], $35::text[], $36::text[], $37::text[],
        $38::text[], $39::text[], $40::text[], $41::text[], $42::text[])
        AS f(call_attempt, attempt, schema_id, schema_version, prompt_version, model, kind, path,
             path_pattern, keyword, message)
    LEFT JOIN calls c ON c.attempt = f.call_attempt
), ob AS (
    INSERT INTO results_outbox (type, message_id, run_no, batch_id, schema_id, schema_version, prompt_version,
        model, outcome, record, detail)
    SELECT CASE $3 WHEN 'held' THEN 'held' WHEN 'failed' THEN 'failed' ELSE 'result' END,
           message_id, run_no, batch_id, $23, $24, $50, $51,
           CASE $3 WHEN 'held' THEN $49::text WHEN 'failed' THEN '' ELSE $3 END,
           coalesce($26::jsonb, $47::jsonb),
           CASE WHEN $3 = 'failed' THEN jsonb_build_object('reason', $29::text, 'errors', $30::jsonb) ELSE '{}' END
    FROM fin WHERE ` + outboxEnabledSQL + `
)
SELECT count(*) FROM fin`

// outcomeArgs returns outcomeWriteSQL's arguments for p, or an error when
// p cannot be written in one statement (calls sharing an attempt).
func outcomeArgs(p RunOutcomeParams) ([]any, error) {
	calls, err := callArrays(p.Calls, p.SchemaID, p.SchemaVersion)
	if err != nil {
		return nil, err
	}

	var extData, extEvidence, extOutcome, extBy any
	if e := p.Extraction; e != nil {
		evidence := CleanJSON(e.Evidence)
		if len(evidence) == 0 {
			evidence = json.RawMessage(`[]`)
		}
		extData, extEvidence = string(CleanJSON(e.Data)), string(evidence)
		extOutcome, extBy = cmp.Or(e.Outcome, p.Status), cmp.Or(e.CreatedBy, "model")
	}
	var triReason, triErrors, triReply, heldData, heldEvidence, heldAs any
	if t := p.Triage; t != nil {
		errs, err := marshalErrorList(t.Errors)
		if err != nil {
			return nil, err
		}
		triReason, triErrors, triReply = CleanText(t.Reason), string(errs), CleanText(t.LastReply)
		if h := t.Held; h != nil {
			evidence := CleanJSON(h.Evidence)
			if len(evidence) == 0 {
				evidence = json.RawMessage(`[]`)
			}
			heldData, heldEvidence, heldAs = string(CleanJSON(h.Data)), string(evidence), h.ValidAs
		}
	}

	m := len(p.Failures)
	var (
		fCall, fAttempt                                = make([]int32, m), make([]int32, m)
		fSchema, fSchemaVer, fPromptVer, fModel, fKind = make([]string, m), make([]string, m), make([]string, m), make([]string, m), make([]string, m)
		fPath, fPattern, fKeyword, fMessage            = make([]string, m), make([]string, m), make([]string, m), make([]string, m)
	)
	for i, f := range p.Failures {
		var call LLMCall
		if f.CallIndex >= 0 {
			call = p.Calls[f.CallIndex]
			fCall[i] = int32(call.Attempt)
		}
		e := cleanError(f.Err)
		fAttempt[i] = int32(cmp.Or(f.Attempt, call.Attempt))
		fSchema[i], fSchemaVer[i] = cmp.Or(f.SchemaID, p.SchemaID), cmp.Or(f.SchemaVersion, p.SchemaVersion)
		fPromptVer[i], fModel[i] = CleanText(cmp.Or(f.PromptVersion, call.PromptVersion)), CleanText(cmp.Or(f.Model, call.Model))
		fKind[i], fPath[i], fPattern[i], fKeyword[i], fMessage[i] = string(e.Kind), e.Path, e.PathPattern(), e.Keyword, e.Message
	}
	args := []any{p.MessageID, p.RunNo, p.Status}
	args = append(args, calls[:19]...)
	args = append(args, p.SchemaID, p.SchemaVersion, extOutcome, extData, extEvidence, extBy,
		triReason, triErrors, triReply,
		fCall, fAttempt, fSchema, fSchemaVer, fPromptVer, fModel, fKind, fPath, fPattern, fKeyword, fMessage)
	args = append(args, calls[19:]...)
	// The outbox event's prompt version and model: the last call's.
	var promptVer, model string
	if n := len(p.Calls); n > 0 {
		promptVer, model = CleanText(p.Calls[n-1].PromptVersion), CleanText(p.Calls[n-1].Model)
	}
	return append(args, heldData, heldEvidence, heldAs, promptVer, model), nil
}

// callArrays returns the column arrays of calls, one element per call, in
// the order outcomeWriteSQL and llmCallSupersededSQL read them: attempt,
// purpose, model, prompt_version, schema_id, schema_version,
// request_mode, repair_strategy, prompt_tokens, completion_tokens,
// cost_usd, price_version, latency_ms, finish_reason, reply, stripped,
// valid, error_count, patch (19 arrays), then cached_tokens,
// usage_estimated, http_status, reply_bytes. schemaID and schemaVersion
// fill a call's empty ones. Two calls with one attempt are an error.
func callArrays(calls []LLMCall, schemaID, schemaVersion string) ([]any, error) {
	n := len(calls)
	var (
		attempt, promptTok, complTok, latency, errCount = make([]int32, n), make([]int32, n), make([]int32, n), make([]int32, n), make([]int32, n)
		purpose, model, promptVer, schemaIDs, schemaVer = make([]string, n), make([]string, n), make([]string, n), make([]string, n), make([]string, n)
		mode, strategy, priceVer, finish, reply         = make([]string, n), make([]string, n), make([]string, n), make([]string, n), make([]string, n)
		stripped                                        = make([]string, n)
		cost                                            = make([]float64, n)
		valid, estimated                                = make([]bool, n), make([]bool, n)
		patch                                           = make([]*string, n)
		cached, status, replyBytes                      = make([]int32, n), make([]int32, n), make([]int32, n)
	)
	seen := map[int]bool{}
	for i, c := range calls {
		if seen[c.Attempt] {
			return nil, fmt.Errorf("two calls with attempt %d", c.Attempt)
		}
		seen[c.Attempt] = true
		attempt[i] = int32(c.Attempt)
		purpose[i] = c.Purpose
		if purpose[i] == "" {
			purpose[i] = "repair"
			if c.Attempt <= 1 {
				purpose[i] = "extract"
			}
		}
		model[i], promptVer[i] = CleanText(c.Model), CleanText(c.PromptVersion)
		schemaIDs[i], schemaVer[i] = cmp.Or(c.SchemaID, schemaID), cmp.Or(c.SchemaVersion, schemaVersion)
		mode[i], strategy[i] = c.RequestMode, c.RepairStrategy
		promptTok[i], complTok[i], cost[i], priceVer[i] = int32(c.PromptTokens), int32(c.CompletionTokens), c.CostUSD, c.PriceVersion
		latency[i], finish[i] = int32(c.LatencyMS), CleanText(c.FinishReason)
		reply[i], stripped[i], valid[i], errCount[i] = CleanText(c.Reply), CleanText(c.Stripped), c.Valid, int32(c.ErrorCount)
		if doc := CleanJSON(c.Patch); len(doc) > 0 {
			s := string(doc)
			patch[i] = &s
		}
		cached[i], estimated[i], status[i], replyBytes[i] = int32(c.CachedTokens), c.UsageEstimated, int32(c.HTTPStatus), int32(c.ReplyBytes)
	}
	return []any{attempt, purpose, model, promptVer, schemaIDs, schemaVer, mode, strategy, promptTok, complTok, cost, priceVer,
		latency, finish, reply, stripped, valid, errCount, patch,
		cached, estimated, status, replyBytes}, nil
}

// RunOutcomeInsertMany writes several runs' outcomes in one transaction and
// one round trip: each outcome is one statement that writes nothing unless
// its run is still queued. It returns one error per params, in order: nil
// for an outcome committed, ErrOutcomeExists for a run that already had
// one, a params error for params that cannot be written. If the
// transaction fails, each outcome is written again on its own (see
// RunOutcomeInsert), so one bad outcome cannot hold the others back.
func (s *Store) RunOutcomeInsertMany(ctx context.Context, params []RunOutcomeParams) []error {
	_, errs := s.RunWriteBatch(ctx, nil, params)
	return errs
}

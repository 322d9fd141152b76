package store

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
)

// outcomeWriteSQL writes the whole outcomes of several runs in one
// statement, each run's only if it was still queued (fin): its status
// change, its calls, its extraction or triage item, its failure events
// (linked to their call by the call's attempt, unique within a run) and
// its results outbox event. One statement for a batch of outcomes, rather
// than one a run, cut Postgres's CPU time per message (issue 18; see
// docs/benchmarks.md). The runs $1, $2 must be distinct (the UPDATE's
// join would write a run once, and its calls twice). It returns the
// positions (1-based, in $1) of the runs it finished; a run missing from
// them already had an outcome, or does not exist.
//
// The arrays, one element a run: message_id, run_no, status, schema_id,
// schema_version; the extraction's outcome, data, evidence, created_by
// (NULL without one); the triage item's reason, errors, last_reply,
// held record, held evidence, held valid_as (NULL without one); the
// outbox event's prompt version and model. One element a call ($18 on,
// see outcomeCols.addCalls), and one a failure event ($43 on).
const outcomeWriteSQL = `
WITH u AS (
    SELECT * FROM unnest($1::bigint[], $2::int[], $3::text[], $4::text[], $5::text[],
        $6::text[], $7::jsonb[], $8::jsonb[], $9::text[],
        $10::text[], $11::jsonb[], $12::text[], $13::jsonb[], $14::jsonb[], $15::text[],
        $16::text[], $17::text[]) WITH ORDINALITY
        AS u(message_id, run_no, status, schema_id, schema_version,
             ext_outcome, ext_data, ext_evidence, ext_by,
             tri_reason, tri_errors, tri_reply, held_data, held_evidence, held_as,
             prompt_version, model, ord)
), fin AS (
    UPDATE runs r
    SET status = u.status, finished_at = now(), published_at = coalesce(r.published_at, now())
    FROM u
    WHERE r.message_id = u.message_id AND r.run_no = u.run_no AND r.status = 'queued'
    RETURNING r.message_id, r.run_no, r.batch_id, u.ord, u.status, u.schema_id, u.schema_version,
        u.ext_outcome, u.ext_data, u.ext_evidence, u.ext_by,
        u.tri_reason, u.tri_errors, u.tri_reply, u.held_data, u.held_evidence, u.held_as,
        u.prompt_version, u.model
), calls AS (
    INSERT INTO llm_calls (
        message_id, run_no, attempt, purpose, model, prompt_version, schema_id, schema_version,
        request_mode, repair_strategy, prompt_tokens, completion_tokens, cost_usd, price_version,
        latency_ms, finish_reason, reply, stripped, valid, error_count, patch,
        cached_tokens, usage_estimated, http_status, reply_bytes)
    SELECT c.message_id, c.run_no, c.attempt, c.purpose, c.model, c.prompt_version, c.schema_id,
           c.schema_version, c.request_mode, c.repair_strategy, c.prompt_tokens, c.completion_tokens,
           c.cost_usd, c.price_version, c.latency_ms, c.finish_reason, c.reply, c.stripped, c.valid,
           c.error_count, c.patch, c.cached_tokens, c.usage_estimated, c.http_status, c.reply_bytes
    FROM unnest($18::bigint[], $19::int[],
        $20::int[], $21::text[], $22::text[], $23::text[], $24::text[], $25::text[],
        $26::text[], $27::text[], $28::int[], $29::int[], $30::float8[], $31::text[], $32::int[],
        $33::text[], $34::text[], $35::text[], $36::bool[], $37::int[], $38::jsonb[],
        $39::int[], $40::bool[], $41::int[], $42::int[])
        AS c(message_id, run_no, attempt, purpose, model, prompt_version, schema_id, schema_version, request_mode,
             repair_strategy, prompt_tokens, completion_tokens, cost_usd, price_version, latency_ms,
             finish_reason, reply, stripped, valid, error_count, patch,
             cached_tokens, usage_estimated, http_status, reply_bytes)
    JOIN fin ON fin.message_id = c.message_id AND fin.run_no = c.run_no
    RETURNING id, message_id, run_no, attempt
), ext AS (
    INSERT INTO extractions (message_id, run_no, schema_id, schema_version, outcome, data, evidence, created_by)
    SELECT message_id, run_no, schema_id, schema_version, ext_outcome, ext_data, ext_evidence, ext_by
    FROM fin WHERE ext_data IS NOT NULL
), tri AS (
    INSERT INTO triage_items (message_id, run_no, schema_id, reason, errors, last_reply,
        held_record, held_evidence, held_valid_as)
    SELECT message_id, run_no, schema_id, tri_reason, tri_errors, tri_reply, held_data, held_evidence, held_as
    FROM fin WHERE tri_reason IS NOT NULL
), fe AS (
    INSERT INTO failure_events (
        llm_call_id, message_id, run_no, attempt, schema_id, schema_version, prompt_version,
        model, kind, path, path_pattern, keyword, message)
    SELECT c.id, f.message_id, f.run_no, f.attempt, f.schema_id, f.schema_version, f.prompt_version,
           f.model, f.kind, f.path, f.path_pattern, f.keyword, f.message
    FROM unnest($43::bigint[], $44::int[], $45::int[], $46::int[], $47::text[], $48::text[], $49::text[],
        $50::text[], $51::text[], $52::text[], $53::text[], $54::text[], $55::text[])
        AS f(message_id, run_no, call_attempt, attempt, schema_id, schema_version, prompt_version, model, kind, path,
             path_pattern, keyword, message)
    JOIN fin ON fin.message_id = f.message_id AND fin.run_no = f.run_no
    LEFT JOIN calls c ON c.message_id = f.message_id AND c.run_no = f.run_no AND c.attempt = f.call_attempt
), ob AS (
    INSERT INTO results_outbox (type, message_id, run_no, batch_id, schema_id, schema_version, prompt_version,
        model, outcome, record, detail)
    SELECT CASE status WHEN 'held' THEN 'held' WHEN 'failed' THEN 'failed' ELSE 'result' END,
           message_id, run_no, batch_id, schema_id, schema_version, prompt_version, model,
           CASE status WHEN 'held' THEN held_as WHEN 'failed' THEN '' ELSE status END,
           coalesce(ext_data, held_data),
           CASE WHEN status = 'failed' THEN jsonb_build_object('reason', tri_reason, 'errors', tri_errors) ELSE '{}' END
    FROM fin WHERE ` + outboxEnabledSQL + `
)
SELECT coalesce(array_agg(ord ORDER BY ord), '{}') FROM fin`

// outcomeCols are outcomeWriteSQL's column arrays for several outcomes.
type outcomeCols struct {
	mid                                     []int64
	runNo                                   []int32
	status, schemaID, schemaVer             []string
	extOutcome, extData, extEvidence, extBy []*string
	triReason, triErrors, triReply          []*string
	heldData, heldEvidence, heldAs          []*string
	promptVer, model                        []string

	callMid   []int64
	callRunNo []int32
	calls     callCols

	fMid                                           []int64
	fRunNo, fCall, fAttempt                        []int32
	fSchema, fSchemaVer, fPromptVer, fModel, fKind []string
	fPath, fPattern, fKeyword, fMessage            []string
}

func strp(s string) *string { return &s }

// add appends p's outcome, or returns an error when p cannot be written
// in the statement (calls sharing an attempt); nothing is appended then.
func (o *outcomeCols) add(p RunOutcomeParams) error {
	var calls callCols
	if err := calls.add(p.Calls, p.SchemaID, p.SchemaVersion); err != nil {
		return err
	}
	var extOutcome, extData, extEvidence, extBy *string
	if e := p.Extraction; e != nil {
		evidence := CleanJSON(e.Evidence)
		if len(evidence) == 0 {
			evidence = json.RawMessage(`[]`)
		}
		extData, extEvidence = strp(string(CleanJSON(e.Data))), strp(string(evidence))
		extOutcome, extBy = strp(cmp.Or(e.Outcome, p.Status)), strp(cmp.Or(e.CreatedBy, "model"))
	}
	var triReason, triErrors, triReply, heldData, heldEvidence, heldAs *string
	if t := p.Triage; t != nil {
		errs, err := marshalErrorList(t.Errors)
		if err != nil {
			return err
		}
		triReason, triErrors, triReply = strp(CleanText(t.Reason)), strp(string(errs)), strp(CleanText(t.LastReply))
		if h := t.Held; h != nil {
			evidence := CleanJSON(h.Evidence)
			if len(evidence) == 0 {
				evidence = json.RawMessage(`[]`)
			}
			heldData, heldEvidence, heldAs = strp(string(CleanJSON(h.Data))), strp(string(evidence)), strp(h.ValidAs)
		}
	}
	o.mid, o.runNo = append(o.mid, p.MessageID), append(o.runNo, int32(p.RunNo))
	o.status, o.schemaID, o.schemaVer = append(o.status, p.Status), append(o.schemaID, p.SchemaID), append(o.schemaVer, p.SchemaVersion)
	o.extOutcome, o.extData, o.extEvidence, o.extBy = append(o.extOutcome, extOutcome), append(o.extData, extData),
		append(o.extEvidence, extEvidence), append(o.extBy, extBy)
	o.triReason, o.triErrors, o.triReply = append(o.triReason, triReason), append(o.triErrors, triErrors), append(o.triReply, triReply)
	o.heldData, o.heldEvidence, o.heldAs = append(o.heldData, heldData), append(o.heldEvidence, heldEvidence), append(o.heldAs, heldAs)
	// The outbox event's prompt version and model: the last call's.
	var promptVer, model string
	if n := len(p.Calls); n > 0 {
		promptVer, model = CleanText(p.Calls[n-1].PromptVersion), CleanText(p.Calls[n-1].Model)
	}
	o.promptVer, o.model = append(o.promptVer, promptVer), append(o.model, model)

	for range p.Calls {
		o.callMid, o.callRunNo = append(o.callMid, p.MessageID), append(o.callRunNo, int32(p.RunNo))
	}
	o.calls.appendCols(&calls)

	for _, f := range p.Failures {
		var call LLMCall
		var callAttempt int32
		if f.CallIndex >= 0 {
			call = p.Calls[f.CallIndex]
			callAttempt = int32(call.Attempt)
		}
		e := cleanError(f.Err)
		o.fMid, o.fRunNo = append(o.fMid, p.MessageID), append(o.fRunNo, int32(p.RunNo))
		o.fCall, o.fAttempt = append(o.fCall, callAttempt), append(o.fAttempt, int32(cmp.Or(f.Attempt, call.Attempt)))
		o.fSchema, o.fSchemaVer = append(o.fSchema, cmp.Or(f.SchemaID, p.SchemaID)), append(o.fSchemaVer, cmp.Or(f.SchemaVersion, p.SchemaVersion))
		o.fPromptVer = append(o.fPromptVer, CleanText(cmp.Or(f.PromptVersion, call.PromptVersion)))
		o.fModel = append(o.fModel, CleanText(cmp.Or(f.Model, call.Model)))
		o.fKind, o.fPath, o.fPattern = append(o.fKind, string(e.Kind)), append(o.fPath, e.Path), append(o.fPattern, e.PathPattern())
		o.fKeyword, o.fMessage = append(o.fKeyword, e.Keyword), append(o.fMessage, e.Message)
	}
	return nil
}

// args returns outcomeWriteSQL's arguments.
func (o *outcomeCols) args() []any {
	args := []any{o.mid, o.runNo, o.status, o.schemaID, o.schemaVer,
		o.extOutcome, o.extData, o.extEvidence, o.extBy,
		o.triReason, o.triErrors, o.triReply, o.heldData, o.heldEvidence, o.heldAs,
		o.promptVer, o.model, o.callMid, o.callRunNo}
	args = append(args, o.calls.arrays()...)
	return append(args, o.fMid, o.fRunNo, o.fCall, o.fAttempt, o.fSchema, o.fSchemaVer, o.fPromptVer, o.fModel,
		o.fKind, o.fPath, o.fPattern, o.fKeyword, o.fMessage)
}

// callCols are the column arrays of calls, one element per call.
type callCols struct {
	attempt, promptTok, complTok, latency, errCount []int32
	purpose, model, promptVer, schemaIDs, schemaVer []string
	mode, strategy, priceVer, finish, reply         []string
	stripped                                        []string
	cost                                            []float64
	valid, estimated                                []bool
	patch                                           []*string
	cached, status, replyBytes                      []int32
}

// add appends calls; schemaID and schemaVersion fill a call's empty
// ones. Two calls with one attempt are an error (nothing appended).
func (cc *callCols) add(calls []LLMCall, schemaID, schemaVersion string) error {
	for i, c := range calls {
		for _, d := range calls[:i] {
			if d.Attempt == c.Attempt {
				return fmt.Errorf("two calls with attempt %d", c.Attempt)
			}
		}
	}
	for _, c := range calls {
		purpose := c.Purpose
		if purpose == "" {
			purpose = "repair"
			if c.Attempt <= 1 {
				purpose = "extract"
			}
		}
		var patch *string
		if doc := CleanJSON(c.Patch); len(doc) > 0 {
			patch = strp(string(doc))
		}
		cc.attempt = append(cc.attempt, int32(c.Attempt))
		cc.purpose = append(cc.purpose, purpose)
		cc.model, cc.promptVer = append(cc.model, CleanText(c.Model)), append(cc.promptVer, CleanText(c.PromptVersion))
		cc.schemaIDs, cc.schemaVer = append(cc.schemaIDs, cmp.Or(c.SchemaID, schemaID)), append(cc.schemaVer, cmp.Or(c.SchemaVersion, schemaVersion))
		cc.mode, cc.strategy = append(cc.mode, c.RequestMode), append(cc.strategy, c.RepairStrategy)
		cc.promptTok, cc.complTok = append(cc.promptTok, int32(c.PromptTokens)), append(cc.complTok, int32(c.CompletionTokens))
		cc.cost, cc.priceVer = append(cc.cost, c.CostUSD), append(cc.priceVer, c.PriceVersion)
		cc.latency, cc.finish = append(cc.latency, int32(c.LatencyMS)), append(cc.finish, CleanText(c.FinishReason))
		cc.reply, cc.stripped = append(cc.reply, CleanText(c.Reply)), append(cc.stripped, CleanText(c.Stripped))
		cc.valid, cc.errCount = append(cc.valid, c.Valid), append(cc.errCount, int32(c.ErrorCount))
		cc.patch = append(cc.patch, patch)
		cc.cached, cc.estimated = append(cc.cached, int32(c.CachedTokens)), append(cc.estimated, c.UsageEstimated)
		cc.status, cc.replyBytes = append(cc.status, int32(c.HTTPStatus)), append(cc.replyBytes, int32(c.ReplyBytes))
	}
	return nil
}

// appendCols appends o's calls.
func (cc *callCols) appendCols(o *callCols) {
	cc.attempt, cc.promptTok, cc.complTok = append(cc.attempt, o.attempt...), append(cc.promptTok, o.promptTok...), append(cc.complTok, o.complTok...)
	cc.latency, cc.errCount = append(cc.latency, o.latency...), append(cc.errCount, o.errCount...)
	cc.purpose, cc.model, cc.promptVer = append(cc.purpose, o.purpose...), append(cc.model, o.model...), append(cc.promptVer, o.promptVer...)
	cc.schemaIDs, cc.schemaVer = append(cc.schemaIDs, o.schemaIDs...), append(cc.schemaVer, o.schemaVer...)
	cc.mode, cc.strategy, cc.priceVer = append(cc.mode, o.mode...), append(cc.strategy, o.strategy...), append(cc.priceVer, o.priceVer...)
	cc.finish, cc.reply, cc.stripped = append(cc.finish, o.finish...), append(cc.reply, o.reply...), append(cc.stripped, o.stripped...)
	cc.cost, cc.valid, cc.estimated = append(cc.cost, o.cost...), append(cc.valid, o.valid...), append(cc.estimated, o.estimated...)
	cc.patch, cc.cached = append(cc.patch, o.patch...), append(cc.cached, o.cached...)
	cc.status, cc.replyBytes = append(cc.status, o.status...), append(cc.replyBytes, o.replyBytes...)
}

// arrays returns the columns in the order outcomeWriteSQL and
// llmCallSupersededSQL read them: attempt, purpose, model,
// prompt_version, schema_id, schema_version, request_mode,
// repair_strategy, prompt_tokens, completion_tokens, cost_usd,
// price_version, latency_ms, finish_reason, reply, stripped, valid,
// error_count, patch, cached_tokens, usage_estimated, http_status,
// reply_bytes. The costs go as float8, cast to numeric(14, 8) by
// Postgres: pgx's own numeric encoding formatted each as text, 2% of the
// worker's CPU in scenario R, and both round alike to 8 decimals below
// 10^6 dollars (15 significant digits). An empty column is an empty
// array, not NULL (pgx's encoding of a nil slice).
func (cc *callCols) arrays() []any {
	nz := func(v []int32) []int32 {
		if v == nil {
			return []int32{}
		}
		return v
	}
	ns := func(v []string) []string {
		if v == nil {
			return []string{}
		}
		return v
	}
	cost, valid, estimated, patch := cc.cost, cc.valid, cc.estimated, cc.patch
	if cost == nil {
		cost, valid, estimated, patch = []float64{}, []bool{}, []bool{}, []*string{}
	}
	return []any{nz(cc.attempt), ns(cc.purpose), ns(cc.model), ns(cc.promptVer), ns(cc.schemaIDs), ns(cc.schemaVer),
		ns(cc.mode), ns(cc.strategy), nz(cc.promptTok), nz(cc.complTok), cost, ns(cc.priceVer),
		nz(cc.latency), ns(cc.finish), ns(cc.reply), ns(cc.stripped), valid, nz(cc.errCount), patch,
		nz(cc.cached), estimated, nz(cc.status), nz(cc.replyBytes)}
}

// callArrays returns the column arrays of calls (callCols.arrays).
func callArrays(calls []LLMCall, schemaID, schemaVersion string) ([]any, error) {
	var cc callCols
	if err := cc.add(calls, schemaID, schemaVersion); err != nil {
		return nil, err
	}
	return cc.arrays(), nil
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

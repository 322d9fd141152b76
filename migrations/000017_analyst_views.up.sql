-- Views an analyst can read from psql or a BI tool (docs/views.md). None
-- carries customer text or values.

-- Where each batch stands: its messages' latest runs in the batch, and
-- every LLM call of its runs (superseded ones too: they were paid). The
-- same figures as `report` and store.BatchSummary.
CREATE VIEW batch_summary AS
WITH counts AS (
    SELECT l.batch_id,
           count(*)                                       AS messages,
           count(*) FILTER (WHERE l.status = 'queued')    AS queued,
           count(*) FILTER (WHERE l.status = 'succeeded') AS succeeded,
           count(*) FILTER (WHERE l.status = 'repaired')  AS repaired,
           count(*) FILTER (WHERE l.status = 'failed')    AS failed,
           count(*) FILTER (WHERE m.erased_at IS NOT NULL) AS erased
    FROM (SELECT DISTINCT ON (r.batch_id, r.message_id) r.batch_id, r.message_id, r.status
          FROM runs r ORDER BY r.batch_id, r.message_id, r.run_no DESC) l
    JOIN messages m ON m.id = l.message_id
    GROUP BY l.batch_id
), calls AS (
    SELECT r.batch_id,
           count(*)                              AS llm_calls,
           coalesce(sum(c.prompt_tokens), 0)     AS prompt_tokens,
           coalesce(sum(c.completion_tokens), 0) AS completion_tokens,
           coalesce(sum(c.cost_usd), 0)          AS cost_usd
    FROM llm_calls c
    JOIN runs r ON r.message_id = c.message_id AND r.run_no = c.run_no
    GROUP BY r.batch_id
)
SELECT b.id AS batch_id, b.schema_id, b.source_name, b.created_at,
       coalesce(n.messages, 0) AS messages, coalesce(n.queued, 0) AS queued,
       coalesce(n.succeeded, 0) AS succeeded, coalesce(n.repaired, 0) AS repaired,
       coalesce(n.failed, 0) AS failed, coalesce(n.erased, 0) AS erased,
       coalesce(c.llm_calls, 0) AS llm_calls, coalesce(c.prompt_tokens, 0) AS prompt_tokens,
       coalesce(c.completion_tokens, 0) AS completion_tokens, coalesce(c.cost_usd, 0) AS cost_usd
FROM batches b
LEFT JOIN counts n ON n.batch_id = b.id
LEFT JOIN calls c ON c.batch_id = b.id;

-- What each batch cost, per version and model: every call of its runs
-- (superseded ones too), by schema version, prompt version and model.
-- cost_per_run_usd divides by the runs those calls served.
CREATE VIEW batch_cost AS
SELECT r.batch_id, c.schema_id, c.schema_version, c.prompt_version, c.model,
       count(*)                                     AS calls,
       count(*) FILTER (WHERE c.purpose = 'repair') AS repair_calls,
       count(*) FILTER (WHERE c.superseded)         AS superseded_calls,
       count(DISTINCT (c.message_id, c.run_no))     AS runs,
       sum(c.prompt_tokens)                         AS prompt_tokens,
       sum(c.cached_tokens)                         AS cached_tokens,
       sum(c.completion_tokens)                     AS completion_tokens,
       sum(c.cost_usd)                              AS cost_usd,
       round(sum(c.cost_usd) / nullif(count(DISTINCT (c.message_id, c.run_no)), 0), 8) AS cost_per_run_usd
FROM llm_calls c
JOIN runs r ON r.message_id = c.message_id AND r.run_no = c.run_no
GROUP BY r.batch_id, c.schema_id, c.schema_version, c.prompt_version, c.model;

-- The triage backlog per schema: open items, how old, and throughput
-- (decided: approved, rejected or re-run, by when the decision was made).
CREATE VIEW triage_backlog AS
SELECT t.schema_id,
       count(*) FILTER (WHERE t.status = 'open')                                   AS open,
       count(*) FILTER (WHERE t.status = 'open' AND t.claim_expires > now())       AS claimed,
       min(t.created_at) FILTER (WHERE t.status = 'open')                          AS oldest_open_at,
       round((extract(epoch FROM now() - min(t.created_at) FILTER (WHERE t.status = 'open')) / 3600)::numeric, 2) AS oldest_open_hours,
       round((percentile_cont(0.5) WITHIN GROUP (ORDER BY extract(epoch FROM now() - t.created_at))
              FILTER (WHERE t.status = 'open') / 3600)::numeric, 2)                AS median_open_hours,
       count(*) FILTER (WHERE t.created_at >= now() - interval '24 hours')         AS new_24h,
       count(*) FILTER (WHERE t.status <> 'open' AND t.updated_at >= now() - interval '24 hours') AS decided_24h,
       count(*) FILTER (WHERE t.status <> 'open' AND t.updated_at >= now() - interval '7 days')   AS decided_7d,
       count(*) FILTER (WHERE t.status = 'approved') AS approved,
       count(*) FILTER (WHERE t.status = 'rejected') AS rejected,
       count(*) FILTER (WHERE t.status = 'rerun')    AS rerun
FROM triage_items t
GROUP BY t.schema_id;

-- Field failures: errors at a field of the record (a JSON Pointer path),
-- by kind and keyword. Whole-reply and provider failures (path '') are
-- in reply_failures instead, so they never show as a '/' row beside real
-- fields. failing_fields keeps its shape for the report and the API.
CREATE VIEW field_failures AS
SELECT f.schema_id, f.path_pattern, f.kind, f.keyword,
       count(*)                                             AS errors,
       count(DISTINCT (f.message_id, f.run_no))             AS runs,
       count(*) FILTER (WHERE f.attempt = 1)                AS first_pass_errors,
       count(DISTINCT (f.message_id, f.run_no)) FILTER (WHERE r.status = 'repaired') AS runs_repaired,
       count(DISTINCT (f.message_id, f.run_no)) FILTER (WHERE r.status = 'failed')   AS runs_failed,
       min(f.created_at)                                    AS first_seen,
       max(f.created_at)                                    AS last_seen
FROM failure_events f
JOIN runs r ON r.message_id = f.message_id AND r.run_no = f.run_no
WHERE f.path_pattern <> ''
GROUP BY f.schema_id, f.path_pattern, f.kind, f.keyword;

-- Reply and provider failures: errors of a whole reply or call (no JSON,
-- cut off, refused, budget, a refused request, the delivery limit), by
-- kind and keyword, apart from field failures.
CREATE VIEW reply_failures AS
SELECT f.schema_id, f.kind, f.keyword,
       count(*)                                             AS errors,
       count(DISTINCT (f.message_id, f.run_no))             AS runs,
       count(*) FILTER (WHERE f.attempt = 1)                AS first_pass_errors,
       count(DISTINCT (f.message_id, f.run_no)) FILTER (WHERE r.status = 'repaired') AS runs_repaired,
       count(DISTINCT (f.message_id, f.run_no)) FILTER (WHERE r.status = 'failed')   AS runs_failed,
       min(f.created_at)                                    AS first_seen,
       max(f.created_at)                                    AS last_seen
FROM failure_events f
JOIN runs r ON r.message_id = f.message_id AND r.run_no = f.run_no
WHERE f.path_pattern = ''
GROUP BY f.schema_id, f.kind, f.keyword;

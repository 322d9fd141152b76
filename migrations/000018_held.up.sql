-- Held results (docs/extraction.md, "Review rules"; docs/triage.md, "Held
-- items"): a run whose record validated but that a review rule (x-review)
-- holds for a person. The run's status is held; the record waits on the
-- run's triage item (reason 'held', errors the rules that held it), not in
-- extractions, so it is no result: not in current_results, exports or
-- reports of results until a reviewer approves it (an extraction of
-- outcome approved, as for a failed run) or rejects it.
ALTER TABLE runs DROP CONSTRAINT runs_status_check;
ALTER TABLE runs ADD CONSTRAINT runs_status_check
    CHECK (status IN ('queued', 'succeeded', 'repaired', 'held', 'failed'));

-- held_record and held_evidence are the validated record and its
-- grounding evidence as the worker held them (customer values: erasure
-- blanks them); held_valid_as says how the record validated (succeeded: at
-- the first pass; repaired: after the one repair).
ALTER TABLE triage_items
    ADD COLUMN held_record   jsonb,
    ADD COLUMN held_evidence jsonb,
    ADD COLUMN held_valid_as text
        CONSTRAINT triage_items_held_valid_as_check CHECK (held_valid_as IN ('succeeded', 'repaired')),
    ADD CONSTRAINT triage_items_held_check CHECK ((reason = 'held') = (held_valid_as IS NOT NULL));

-- batch_summary counts held runs apart (a new last column: CREATE OR
-- REPLACE VIEW may only add columns at the end).
CREATE OR REPLACE VIEW batch_summary AS
WITH counts AS (
    SELECT l.batch_id,
           count(*)                                       AS messages,
           count(*) FILTER (WHERE l.status = 'queued')    AS queued,
           count(*) FILTER (WHERE l.status = 'succeeded') AS succeeded,
           count(*) FILTER (WHERE l.status = 'repaired')  AS repaired,
           count(*) FILTER (WHERE l.status = 'failed')    AS failed,
           count(*) FILTER (WHERE m.erased_at IS NOT NULL) AS erased,
           count(*) FILTER (WHERE l.status = 'held')      AS held
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
       coalesce(c.completion_tokens, 0) AS completion_tokens, coalesce(c.cost_usd, 0) AS cost_usd,
       coalesce(n.held, 0) AS held
FROM batches b
LEFT JOIN counts n ON n.batch_id = b.id
LEFT JOIN calls c ON c.batch_id = b.id;

-- triage_backlog shows the open held items apart (a new last column).
CREATE OR REPLACE VIEW triage_backlog AS
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
       count(*) FILTER (WHERE t.status = 'rerun')    AS rerun,
       count(*) FILTER (WHERE t.status = 'open' AND t.reason = 'held') AS open_held
FROM triage_items t
GROUP BY t.schema_id;

-- "Does the repair fix it": a run whose record validated after the repair
-- and that a review rule then held was fixed by the repair, though it is
-- no result yet: runs_repaired counts it. A held run validated, so it did
-- so after the repair exactly when its deciding repair call is valid; that
-- is read from llm_calls (as triage_items.held_valid_as says), which the
-- analyst role may read, not from triage_items, which it may not. The
-- views failing_fields and repair_effectiveness and the _since functions
-- read the _in functions, so they follow.
CREATE OR REPLACE FUNCTION failing_fields_in(since timestamptz, in_batch text)
RETURNS TABLE (
    schema_id         text,
    path_pattern      text,
    kind              text,
    errors            bigint,
    runs              bigint,
    first_pass_errors bigint,
    runs_repaired     bigint,
    runs_failed       bigint,
    first_seen        timestamptz,
    last_seen         timestamptz
)
LANGUAGE sql STABLE AS $$
SELECT f.schema_id,
       CASE WHEN f.path_pattern = '' THEN '/' ELSE f.path_pattern END,
       f.kind,
       count(*),
       count(DISTINCT (f.message_id, f.run_no)),
       count(*) FILTER (WHERE f.attempt = 1),
       count(DISTINCT (f.message_id, f.run_no)) FILTER (WHERE r.status = 'repaired' OR r.status = 'held' AND EXISTS (
           SELECT 1 FROM llm_calls c WHERE c.message_id = f.message_id AND c.run_no = f.run_no
             AND c.purpose = 'repair' AND c.valid AND NOT c.superseded)),
       count(DISTINCT (f.message_id, f.run_no)) FILTER (WHERE r.status = 'failed'),
       min(f.created_at),
       max(f.created_at)
FROM failure_events f
JOIN runs r ON r.message_id = f.message_id AND r.run_no = f.run_no
WHERE f.created_at >= since AND (in_batch IS NULL OR r.batch_id = in_batch)
GROUP BY f.schema_id, f.path_pattern, f.kind
$$;

CREATE OR REPLACE FUNCTION repair_effectiveness_in(since timestamptz, in_batch text)
RETURNS TABLE (
    schema_id     text,
    path_pattern  text,
    runs_flagged  bigint,
    runs_repaired bigint,
    repaired_pct  numeric
)
LANGUAGE sql STABLE AS $$
SELECT f.schema_id,
       CASE WHEN f.path_pattern = '' THEN '/' ELSE f.path_pattern END,
       count(DISTINCT (f.message_id, f.run_no)),
       count(DISTINCT (f.message_id, f.run_no)) FILTER (WHERE r.status = 'repaired' OR r.status = 'held' AND EXISTS (
           SELECT 1 FROM llm_calls c WHERE c.message_id = f.message_id AND c.run_no = f.run_no
             AND c.purpose = 'repair' AND c.valid AND NOT c.superseded)),
       round(100.0 * count(DISTINCT (f.message_id, f.run_no)) FILTER (WHERE r.status = 'repaired' OR r.status = 'held' AND EXISTS (
           SELECT 1 FROM llm_calls c WHERE c.message_id = f.message_id AND c.run_no = f.run_no
             AND c.purpose = 'repair' AND c.valid AND NOT c.superseded))
             / nullif(count(DISTINCT (f.message_id, f.run_no)), 0), 1)
FROM failure_events f
JOIN runs r ON r.message_id = f.message_id AND r.run_no = f.run_no
WHERE f.attempt = 1 AND f.created_at >= since AND (in_batch IS NULL OR r.batch_id = in_batch)
  AND EXISTS (SELECT 1 FROM llm_calls c
              WHERE c.message_id = f.message_id AND c.run_no = f.run_no AND c.purpose = 'repair')
GROUP BY f.schema_id, f.path_pattern
$$;

CREATE OR REPLACE VIEW field_failures AS
SELECT f.schema_id, f.path_pattern, f.kind, f.keyword,
       count(*)                                             AS errors,
       count(DISTINCT (f.message_id, f.run_no))             AS runs,
       count(*) FILTER (WHERE f.attempt = 1)                AS first_pass_errors,
       count(DISTINCT (f.message_id, f.run_no)) FILTER (WHERE r.status = 'repaired' OR r.status = 'held' AND EXISTS (
           SELECT 1 FROM llm_calls c WHERE c.message_id = f.message_id AND c.run_no = f.run_no
             AND c.purpose = 'repair' AND c.valid AND NOT c.superseded)) AS runs_repaired,
       count(DISTINCT (f.message_id, f.run_no)) FILTER (WHERE r.status = 'failed')   AS runs_failed,
       min(f.created_at)                                    AS first_seen,
       max(f.created_at)                                    AS last_seen
FROM failure_events f
JOIN runs r ON r.message_id = f.message_id AND r.run_no = f.run_no
WHERE f.path_pattern <> ''
GROUP BY f.schema_id, f.path_pattern, f.kind, f.keyword;

CREATE OR REPLACE VIEW reply_failures AS
SELECT f.schema_id, f.kind, f.keyword,
       count(*)                                             AS errors,
       count(DISTINCT (f.message_id, f.run_no))             AS runs,
       count(*) FILTER (WHERE f.attempt = 1)                AS first_pass_errors,
       count(DISTINCT (f.message_id, f.run_no)) FILTER (WHERE r.status = 'repaired' OR r.status = 'held' AND EXISTS (
           SELECT 1 FROM llm_calls c WHERE c.message_id = f.message_id AND c.run_no = f.run_no
             AND c.purpose = 'repair' AND c.valid AND NOT c.superseded)) AS runs_repaired,
       count(DISTINCT (f.message_id, f.run_no)) FILTER (WHERE r.status = 'failed')   AS runs_failed,
       min(f.created_at)                                    AS first_seen,
       max(f.created_at)                                    AS last_seen
FROM failure_events f
JOIN runs r ON r.message_id = f.message_id AND r.run_no = f.run_no
WHERE f.path_pattern = ''
GROUP BY f.schema_id, f.kind, f.keyword;

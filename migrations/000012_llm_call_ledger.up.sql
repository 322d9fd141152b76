-- Every paid call in the ledger, with what its usage was. See
-- docs/extraction.md ("Budget and cost") and docs/reports.md.
--
--   cached_tokens    the part of prompt_tokens the provider served from its
--                    prompt cache (priced at the cached rate), 0 when it
--                    reported none;
--   usage_estimated  the reply carried no usage (or could not be decoded):
--                    prompt_tokens and completion_tokens are the worker's
--                    estimates (one token per four bytes), never a silent 0;
--   superseded       the call's delivery did not decide the run: it ended
--                    in a nak (a provider failure or a shutdown after the
--                    call), or another delivery of the run committed the
--                    outcome first. The call was paid and counts in cost
--                    and tokens, but the run's own calls are those of the
--                    delivery that decided it;
--   http_status,     for a reply that could not be decoded as a chat
--   reply_bytes      completion (finish_reason 'undecodable'): its HTTP
--                    status and its size in bytes; 0 for other calls.
ALTER TABLE llm_calls
    ADD COLUMN cached_tokens   int NOT NULL DEFAULT 0,
    ADD COLUMN usage_estimated boolean NOT NULL DEFAULT false,
    ADD COLUMN superseded      boolean NOT NULL DEFAULT false,
    ADD COLUMN http_status     int NOT NULL DEFAULT 0,
    ADD COLUMN reply_bytes     int NOT NULL DEFAULT 0;

-- A run's repair is one of the calls of the delivery that decided it: a
-- superseded delivery's repair call does not make the run one that got a
-- repair (migration 000009 otherwise).
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
       count(DISTINCT (f.message_id, f.run_no)) FILTER (WHERE r.status = 'repaired'),
       round(100.0 * count(DISTINCT (f.message_id, f.run_no)) FILTER (WHERE r.status = 'repaired')
             / nullif(count(DISTINCT (f.message_id, f.run_no)), 0), 1)
FROM failure_events f
JOIN runs r ON r.message_id = f.message_id AND r.run_no = f.run_no
WHERE f.attempt = 1 AND f.created_at >= since AND (in_batch IS NULL OR r.batch_id = in_batch)
  AND EXISTS (SELECT 1 FROM llm_calls c
              WHERE c.message_id = f.message_id AND c.run_no = f.run_no AND c.purpose = 'repair'
                AND NOT c.superseded)
GROUP BY f.schema_id, f.path_pattern
$$;

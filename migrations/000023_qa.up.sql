-- QA sampling of successes (docs/triage.md, "The QA queue"; docs/views.md,
-- "qa_field_estimates"): a configured share of the runs whose record
-- passed validation is drawn, when the outcome commits and in its
-- transaction, for a reviewer to mark each field right or wrong. The
-- verdicts estimate each field's false-accept rate (a valid record whose
-- value is wrong) per cohort, weighted by the inverse of each sample's
-- inclusion probability.

-- One sampled run. share is the probability the run had of being drawn
-- (the configured share of its stratum), draw the run's deterministic
-- draw in [0, 1) (drawn when draw < share). stratum is the record's value
-- at stratify_by (a JSON Pointer; '' for none): a customer value, which
-- erasure blanks. The cohort (schema_version, prompt_version, model) is
-- the deciding call's. status: open (waiting for a reviewer), reviewed,
-- or erased (closed unreviewed by an erasure).
CREATE TABLE qa_samples (
    id             bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    message_id     bigint NOT NULL,
    run_no         int NOT NULL,
    schema_id      text NOT NULL,
    schema_version text NOT NULL,
    prompt_version text NOT NULL DEFAULT '',
    model          text NOT NULL DEFAULT '',
    stratify_by    text NOT NULL DEFAULT '',
    stratum        text NOT NULL DEFAULT '',
    share          double precision NOT NULL CHECK (share > 0 AND share <= 1),
    draw           double precision NOT NULL CHECK (draw >= 0 AND draw < 1),
    status         text NOT NULL DEFAULT 'open' CHECK (status IN ('open', 'reviewed', 'erased')),
    claimed_by     text,
    claim_expires  timestamptz,
    reviewed_by    text,
    reviewed_at    timestamptz,
    created_at     timestamptz NOT NULL DEFAULT now(),
    FOREIGN KEY (message_id, run_no) REFERENCES runs (message_id, run_no),
    CONSTRAINT qa_samples_run_key UNIQUE (message_id, run_no)
);
CREATE INDEX qa_samples_open_idx ON qa_samples (schema_id, created_at) WHERE status = 'open';
CREATE INDEX qa_samples_message_idx ON qa_samples (message_id);

-- A reviewer's verdict on one field (a top-level property, by its JSON
-- Pointer) of a sampled record: correct, or not and then fixed, the
-- reviewer's value (JSON; a customer value, which erasure blanks).
CREATE TABLE qa_verdicts (
    sample_id bigint NOT NULL REFERENCES qa_samples (id),
    path      text NOT NULL,
    correct   boolean NOT NULL,
    fixed     jsonb,
    PRIMARY KEY (sample_id, path)
);

-- The false-accept rate of each field per cohort, estimated from the
-- reviewed samples: the Hajek estimator sum(w*y)/sum(w), w = 1/share (the
-- inverse inclusion probability), y = 1 when the field is wrong; with the
-- Wilson score interval (95%, z = 1.959964) on Kish's effective sample
-- size n_eff = sum(w)^2/sum(w^2) (Kish 1965, Survey Sampling, 11.7),
-- as Franco, Little, Louis and Slud (2019, J. Survey Stat. Methodol.
-- 7(3)) recommend for proportions from unequal-weight samples. The field
-- '(record)' is the whole record: some field wrong. It holds counts and
-- rates, never customer values, so analysts may read it.
CREATE VIEW qa_field_estimates AS
WITH y AS (
    SELECT s.schema_id, s.schema_version, s.prompt_version, s.model, v.path AS field,
           1.0 / s.share AS w, CASE WHEN v.correct THEN 0 ELSE 1 END AS wrong
    FROM qa_samples s JOIN qa_verdicts v ON v.sample_id = s.id
    WHERE s.reviewed_at IS NOT NULL
    UNION ALL
    SELECT s.schema_id, s.schema_version, s.prompt_version, s.model, '(record)',
           1.0 / s.share, CASE WHEN bool_and(v.correct) THEN 0 ELSE 1 END
    FROM qa_samples s JOIN qa_verdicts v ON v.sample_id = s.id
    WHERE s.reviewed_at IS NOT NULL
    GROUP BY s.id
), a AS (
    SELECT schema_id, schema_version, prompt_version, model, field,
           count(*) AS reviewed, sum(wrong) AS wrong,
           sum(w * wrong) / sum(w) AS p, sum(w) ^ 2 / sum(w * w) AS n
    FROM y
    GROUP BY schema_id, schema_version, prompt_version, model, field
)
SELECT schema_id, schema_version, prompt_version, model, field, reviewed, wrong,
       round(p::numeric, 6) AS false_accept_rate,
       round(n::numeric, 1) AS effective_n,
       round(greatest(0, (p + 3.841459 / (2 * n) - 1.959964 * sqrt(p * (1 - p) / n + 3.841459 / (4 * n * n))) / (1 + 3.841459 / n))::numeric, 6) AS low,
       round(least(1, (p + 3.841459 / (2 * n) + 1.959964 * sqrt(p * (1 - p) / n + 3.841459 / (4 * n * n))) / (1 + 3.841459 / n))::numeric, 6) AS high
FROM a;

-- analyst_grant (000021) grants qa_field_estimates too.
CREATE OR REPLACE FUNCTION analyst_grant(grantee name) RETURNS void LANGUAGE plpgsql AS $$
BEGIN
    EXECUTE format('GRANT USAGE ON SCHEMA %I TO %I', current_schema(), grantee);
    EXECUTE format('GRANT SELECT ON failing_fields, repair_effectiveness, failure_events, runs, batches TO %I', grantee);
    EXECUTE format('GRANT SELECT ON batch_summary, batch_cost, triage_backlog, field_failures, reply_failures, eval_results TO %I', grantee);
    EXECUTE format('GRANT SELECT ON qa_field_estimates TO %I', grantee);
    EXECUTE format('GRANT SELECT (%s) ON llm_calls TO %I',
        (SELECT string_agg(quote_ident(column_name), ', ' ORDER BY ordinal_position)
         FROM information_schema.columns
         WHERE table_schema = current_schema() AND table_name = 'llm_calls' AND column_name NOT IN ('reply', 'stripped')),
        grantee);
END;
$$;

DO $$
BEGIN
    IF EXISTS (SELECT FROM pg_roles WHERE rolname = 'extractq_analyst') THEN
        PERFORM analyst_grant('extractq_analyst');
    END IF;
END;
$$;

-- Core tables of the extraction pipeline. See docs/extraction.md and docs/reports.md.

CREATE TABLE batches (
    id          text PRIMARY KEY,
    schema_id   text NOT NULL,
    source_name text NOT NULL DEFAULT '',
    created_at  timestamptz NOT NULL DEFAULT now()
);

-- A customer message, stored once. Key: (source, external_id).
CREATE TABLE messages (
    id           bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    source       text NOT NULL DEFAULT '',
    external_id  text NOT NULL,
    body         text NOT NULL,
    content_hash bytea NOT NULL,
    metadata     jsonb NOT NULL DEFAULT '{}',
    flags        text[] NOT NULL DEFAULT '{}',
    batch_id     text NOT NULL REFERENCES batches (id),
    received_at  timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT messages_source_external_id_key UNIQUE (source, external_id)
);

-- One extraction of a message. status: queued, succeeded, repaired, failed;
-- a reviewer's decision on a failed run is kept on its triage item.
CREATE TABLE runs (
    message_id     bigint NOT NULL REFERENCES messages (id),
    run_no         int NOT NULL CHECK (run_no >= 1),
    batch_id       text NOT NULL REFERENCES batches (id),
    schema_id      text NOT NULL,
    status         text NOT NULL DEFAULT 'queued'
                   CHECK (status IN ('queued', 'succeeded', 'repaired', 'failed')),
    dedup_id       text NOT NULL UNIQUE,
    published_at   timestamptz,
    created_at     timestamptz NOT NULL DEFAULT now(),
    finished_at    timestamptz,
    PRIMARY KEY (message_id, run_no)
);
CREATE INDEX runs_batch_id_idx ON runs (batch_id, status);
CREATE INDEX runs_unpublished_idx ON runs (created_at) WHERE published_at IS NULL;

-- Every LLM call, failed ones too. attempt 1 is the extraction, 2 the repair.
CREATE TABLE llm_calls (
    id                bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    message_id        bigint NOT NULL,
    run_no            int NOT NULL,
    attempt           int NOT NULL CHECK (attempt >= 1),
    purpose           text NOT NULL CHECK (purpose IN ('extract', 'repair')),
    model             text NOT NULL,
    prompt_version    text NOT NULL,
    schema_id         text NOT NULL,
    schema_version    text NOT NULL,
    request_mode      text NOT NULL,
    repair_strategy   text NOT NULL DEFAULT '',
    prompt_tokens     int NOT NULL DEFAULT 0,
    completion_tokens int NOT NULL DEFAULT 0,
    cost_usd          numeric(14, 8) NOT NULL DEFAULT 0,
    price_version     text NOT NULL DEFAULT '',
    latency_ms        int NOT NULL DEFAULT 0,
    finish_reason     text NOT NULL DEFAULT '',
    reply             text NOT NULL DEFAULT '',
    stripped          text NOT NULL DEFAULT '',
    valid             boolean NOT NULL DEFAULT false,
    error_count       int NOT NULL DEFAULT 0,
    created_at        timestamptz NOT NULL DEFAULT now(),
    FOREIGN KEY (message_id, run_no) REFERENCES runs (message_id, run_no)
);
CREATE INDEX llm_calls_run_idx ON llm_calls (message_id, run_no);

-- Validated records only. One per run that succeeded or was repaired, or one
-- made by a reviewer (created_by = 'reviewer').
CREATE TABLE extractions (
    id             bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    message_id     bigint NOT NULL,
    run_no         int NOT NULL,
    schema_id      text NOT NULL,
    schema_version text NOT NULL,
    outcome        text NOT NULL CHECK (outcome IN ('succeeded', 'repaired', 'approved')),
    data           jsonb NOT NULL,
    evidence       jsonb NOT NULL DEFAULT '[]',
    created_by     text NOT NULL DEFAULT 'model',
    created_at     timestamptz NOT NULL DEFAULT now(),
    FOREIGN KEY (message_id, run_no) REFERENCES runs (message_id, run_no),
    CONSTRAINT extractions_run_key UNIQUE (message_id, run_no)
);

-- Failed runs, for people. errors is the typed error list (docs/extraction.md, "Errors and kinds").
CREATE TABLE triage_items (
    id            bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    message_id    bigint NOT NULL,
    run_no        int NOT NULL,
    schema_id     text NOT NULL,
    status        text NOT NULL DEFAULT 'open'
                  CHECK (status IN ('open', 'approved', 'rejected', 'rerun')),
    reason        text NOT NULL,
    errors        jsonb NOT NULL,
    last_reply    text NOT NULL DEFAULT '',
    claimed_by    text,
    claim_expires timestamptz,
    created_at    timestamptz NOT NULL DEFAULT now(),
    updated_at    timestamptz NOT NULL DEFAULT now(),
    FOREIGN KEY (message_id, run_no) REFERENCES runs (message_id, run_no),
    CONSTRAINT triage_items_run_key UNIQUE (message_id, run_no)
);
CREATE INDEX triage_items_open_idx ON triage_items (created_at) WHERE status = 'open';

-- Failure analytics: one row per error per LLM call, for every message.
-- Carries no customer values, so analysts may read it.
CREATE TABLE failure_events (
    id             bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    llm_call_id    bigint REFERENCES llm_calls (id),
    message_id     bigint NOT NULL,
    run_no         int NOT NULL,
    attempt        int NOT NULL,
    schema_id      text NOT NULL,
    schema_version text NOT NULL,
    prompt_version text NOT NULL DEFAULT '',
    model          text NOT NULL DEFAULT '',
    kind           text NOT NULL,
    path           text NOT NULL,
    path_pattern   text NOT NULL,
    keyword        text NOT NULL DEFAULT '',
    message        text NOT NULL,
    created_at     timestamptz NOT NULL DEFAULT now(),
    FOREIGN KEY (message_id, run_no) REFERENCES runs (message_id, run_no)
);
CREATE INDEX failure_events_path_idx ON failure_events (schema_id, path_pattern, created_at);

-- Which fields fail most: errors per field, since when, and how often the
-- run still ended as a result (the repair fixed it).
CREATE VIEW failing_fields AS
SELECT f.schema_id,
       f.path_pattern,
       f.kind,
       count(*)                                             AS errors,
       count(DISTINCT (f.message_id, f.run_no))             AS runs,
       count(*) FILTER (WHERE f.attempt = 1)                AS first_pass_errors,
       count(DISTINCT (f.message_id, f.run_no)) FILTER (WHERE r.status = 'repaired') AS runs_repaired,
       count(DISTINCT (f.message_id, f.run_no)) FILTER (WHERE r.status = 'failed')   AS runs_failed,
       min(f.created_at)                                    AS first_seen,
       max(f.created_at)                                    AS last_seen
FROM failure_events f
JOIN runs r ON r.message_id = f.message_id AND r.run_no = f.run_no
GROUP BY f.schema_id, f.path_pattern, f.kind;

-- Does the repair fix it: for each field path flagged at the first attempt,
-- how many of those runs ended valid after the one repair.
CREATE VIEW repair_effectiveness AS
SELECT f.schema_id,
       f.path_pattern,
       count(DISTINCT (f.message_id, f.run_no)) AS runs_flagged,
       count(DISTINCT (f.message_id, f.run_no)) FILTER (WHERE r.status = 'repaired') AS runs_repaired,
       round(100.0 * count(DISTINCT (f.message_id, f.run_no)) FILTER (WHERE r.status = 'repaired')
             / nullif(count(DISTINCT (f.message_id, f.run_no)), 0), 1) AS repaired_pct
FROM failure_events f
JOIN runs r ON r.message_id = f.message_id AND r.run_no = f.run_no
WHERE f.attempt = 1
GROUP BY f.schema_id, f.path_pattern;

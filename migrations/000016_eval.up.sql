-- Evaluations of batches against labelled messages (cmd/eval,
-- docs/eval.md): an eval_runs row per evaluated batch, an eval_fields row
-- per scored field. Counts and scores only: no expected or predicted value
-- and no text is stored, so erasure has nothing here to remove.
--
--   model, prompt_version, schema_version  what the batch's deciding calls
--                   named, comma-separated when several;
--   simulated       every model named is the LLM simulator: the figures
--                   describe the simulator, not a model;
--   labels_name, labels_sha256  the labels file's base name and the SHA-256
--                   of its bytes;
--   raw_labels      grounded fields scored against the raw labels.
CREATE TABLE eval_runs (
    id             bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    batch_id       text NOT NULL REFERENCES batches (id) ON DELETE CASCADE,
    schema_id      text NOT NULL,
    schema_version text NOT NULL,
    prompt_version text NOT NULL,
    model          text NOT NULL,
    simulated      boolean NOT NULL,
    labels_name    text NOT NULL,
    labels_sha256  text NOT NULL,
    raw_labels     boolean NOT NULL,
    labels         int NOT NULL,
    matched        int NOT NULL,
    no_record      int NOT NULL,
    created_at     timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX eval_runs_schema_idx ON eval_runs (schema_id, created_at);

-- One field of one evaluation: outcome counts (a wrong value counts in fp
-- and in fn, and in wrong) and each score with its 95% interval, null
-- when its denominator is 0. precision, recall, exact: Wilson; f1:
-- percentile bootstrap (docs/eval.md).
CREATE TABLE eval_fields (
    eval_run_id    bigint NOT NULL REFERENCES eval_runs (id) ON DELETE CASCADE,
    field          text NOT NULL,
    grounded       boolean NOT NULL,
    n              int NOT NULL,
    tp             int NOT NULL,
    fp             int NOT NULL,
    fn             int NOT NULL,
    tn             int NOT NULL,
    wrong          int NOT NULL,
    precision      double precision,
    precision_low  double precision,
    precision_high double precision,
    recall         double precision,
    recall_low     double precision,
    recall_high    double precision,
    f1             double precision,
    f1_low         double precision,
    f1_high        double precision,
    exact          double precision,
    exact_low      double precision,
    exact_high     double precision,
    PRIMARY KEY (eval_run_id, field)
);

-- Every evaluated field with what its batch ran with, for analysts.
CREATE VIEW eval_results AS
SELECT r.id AS eval_run_id, r.created_at, r.batch_id, r.schema_id, r.schema_version,
       r.prompt_version, r.model, r.simulated, r.labels_name, r.raw_labels,
       f.field, f.grounded, f.n, f.tp, f.fp, f.fn, f.tn, f.wrong,
       f.precision, f.precision_low, f.precision_high,
       f.recall, f.recall_low, f.recall_high,
       f.f1, f.f1_low, f.f1_high,
       f.exact, f.exact_low, f.exact_high
FROM eval_runs r
JOIN eval_fields f ON f.eval_run_id = r.id;

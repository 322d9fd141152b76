// Command eval scores a batch's validated records against labelled
// messages, per field: precision, recall, F1 and exact match with 95%
// intervals, stored in Postgres (eval_runs, eval_fields) unless -no-save.
// With -compare it scores a second batch on the same label lines and
// prints both side by side with a paired test per field.
//
// Usage:
//
//	eval -labels FILE [-batch ID | -source FILE | -run] [-spec FILE] [-schema-file FILE] [-raw-labels] [-ignore-source] [-json] [-no-save]
//	eval -labels FILE -batch A -compare B [-spec FILE] [-ignore-source] [-json] [-no-save]
//	eval -qa -batch ID [-spec FILE] [-json] [-no-save]
//
// Without -batch it evaluates the newest batch with messages ingested
// from -source, by default the labels file itself (the bundled sample
// carries its labels); when there is none, or with -run, it first
// ingests that file (NATS_URL) and waits up to -timeout for the worker's
// outcomes, then evaluates the batch it ran. With -qa the labels are the
// QA reviews of the batch's sampled results (docs/triage.md, "The QA
// queue"), not a file. The label semantics, the spec file and the
// statistics are in docs/eval.md. Figures of a batch run on the LLM
// simulator are labelled as simulator figures. It reads DATABASE_URL and
// CONFIG. Exit status: 0 printed, 1 failed, 2 bad usage.
package main

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/extractq/extractq/cmd/internal/cmdconfig"
	"github.com/extractq/extractq/config"
	"github.com/extractq/extractq/eval"
	"github.com/extractq/extractq/internal/startup"
	"github.com/extractq/extractq/pipeline"
	"github.com/extractq/extractq/schemas"
	"github.com/extractq/extractq/store"
)

type options struct {
	labels, batch, source, compare, spec, schemaFile, config, schema string
	raw, ignoreSource, json, noSave, qa, run                         bool
	timeout                                                          time.Duration
	// ingest runs a batch of the labelled messages (natsIngest); nil
	// when it cannot.
	ingest ingestFunc
}

func main() {
	env := startup.ReadEnv()
	var o options
	flag.StringVar(&o.labels, "labels", "", "labelled JSONL: one line per message with id and expected (required; docs/eval.md)")
	flag.StringVar(&o.batch, "batch", "", "batch id (default: the newest batch with messages ingested from -source)")
	flag.StringVar(&o.source, "source", "", "without -batch: the ingested file whose newest batch is evaluated (default: the labels file)")
	flag.StringVar(&o.compare, "compare", "", "a second batch id: compare it (B) with -batch (A) on the same label lines")
	flag.StringVar(&o.spec, "spec", "", "eval spec file (YAML): per-field normalisation, replacing the schema's x-eval")
	flag.StringVar(&o.schemaFile, "schema-file", "", "the schema the batch ran with (default: the embedded <id>.v<version>.json, else the configured file)")
	flag.StringVar(&o.config, "config", env.Config, "configuration file (default: CONFIG, else the embedded defaults)")
	flag.BoolVar(&o.raw, "raw-labels", false, "score grounded fields against the raw labels, even where the expected value is not in the text")
	flag.BoolVar(&o.ignoreSource, "ignore-source", false, "match label lines on id only, whatever source they give (a batch that ingested them again under another source)")
	flag.BoolVar(&o.json, "json", false, "print JSON instead of the table")
	flag.BoolVar(&o.noSave, "no-save", false, "do not record the evaluation in Postgres")
	flag.BoolVar(&o.qa, "qa", false, "labels from the QA reviews of the batch's sampled results, not a file (needs -batch)")
	flag.BoolVar(&o.run, "run", false, "ingest the labelled messages (-source, by default the labels file) and wait for the worker, then evaluate that batch")
	flag.StringVar(&o.schema, "schema", "", "without -batch: the newest batch of this schema is scored (default: of any schema); "+
		"with -run: the schema the messages are extracted with (default: the configuration's first)")
	flag.DurationVar(&o.timeout, "timeout", 10*time.Minute, "with -run, or no batch yet: the most to wait for the worker's outcomes")
	flag.Parse()
	switch {
	case flag.NArg() > 0:
		fmt.Fprintf(os.Stderr, "eval: unexpected argument %q (the labels file is -labels)\n", flag.Arg(0))
		os.Exit(2)
	case o.qa && (o.labels != "" || o.batch == "" || o.compare != "" || o.run):
		fmt.Fprintln(os.Stderr, "eval: -qa takes -batch ID, and neither -labels, -compare nor -run: its labels are the batch's QA reviews")
		os.Exit(2)
	case o.labels == "" && !o.qa:
		fmt.Fprintln(os.Stderr, "eval: -labels FILE (or -qa -batch ID) is required")
		os.Exit(2)
	case o.compare != "" && o.batch == "":
		fmt.Fprintln(os.Stderr, "eval: -compare B needs -batch A")
		os.Exit(2)
	case o.run && o.batch != "":
		fmt.Fprintln(os.Stderr, "eval: -run makes its own batch: leave out -batch")
		os.Exit(2)
	}
	log, err := startup.NewLogger("eval", "warn")
	if err != nil {
		fmt.Fprintln(os.Stderr, "eval:", err)
		os.Exit(2)
	}
	ctx, stop := startup.Context()
	defer stop()
	// Five minutes to score, on top of the wait for the worker's outcomes.
	ctx, cancel := context.WithTimeout(ctx, max(o.timeout, 0)+5*time.Minute)
	defer cancel()
	cfg, err := startup.LoadConfig(o.config, env)
	if err != nil {
		fmt.Fprintln(os.Stderr, "eval:", err)
		os.Exit(2)
	}
	st, err := cmdconfig.OpenStore(ctx, env, log, cmdconfig.StoreOptions{Command: "eval", Budget: cfg.Postgres})
	if err != nil {
		_, err := cmdconfig.Step(err)
		fmt.Fprintln(os.Stderr, "eval:", err)
		os.Exit(1)
	}
	defer st.Close()
	o.ingest = natsIngest(env, cfg, st, log, o.timeout, os.Stderr)
	if err := run(ctx, os.Stdout, st, cfg, o); err != nil {
		fmt.Fprintln(os.Stderr, "eval:", err)
		st.Close()
		os.Exit(1)
	}
}

// run evaluates as o says, on st, and writes the table or JSON to w.
func run(ctx context.Context, w io.Writer, st *store.Store, cfg *config.Config, o options) error {
	var raw []byte
	var labels []eval.Label
	var err error
	if !o.qa {
		if raw, err = os.ReadFile(o.labels); err != nil {
			return err
		}
		if labels, err = eval.ReadLabels(bytes.NewReader(raw)); err != nil {
			return fmt.Errorf("%s: %w", o.labels, err)
		}
	}
	var spec eval.Spec
	if o.spec != "" {
		if spec, err = eval.ReadSpecFile(o.spec); err != nil {
			return err
		}
	}
	if o.batch == "" {
		if o.batch, err = batchToScore(ctx, st, cfg, o); err != nil {
			return err
		}
	}
	labelsName := filepath.Base(o.labels)
	if o.qa {
		if labels, raw, err = eval.QALabels(ctx, st, st.Pool, o.batch); err != nil {
			return err
		}
		labelsName = "qa:" + o.batch
	}
	sum := sha256.Sum256(raw)
	save := eval.SaveParams{LabelsName: labelsName, LabelsSHA256: hex.EncodeToString(sum[:])}
	opt := eval.Options{RawLabels: o.raw, IgnoreSource: o.ignoreSource}
	a, err := evaluate(ctx, st, cfg, o, o.batch, labels, spec, opt)
	if err != nil {
		return err
	}
	reports := []*eval.Report{a}
	var cmp *eval.Comparison
	if o.compare != "" {
		b, err := evaluate(ctx, st, cfg, o, o.compare, labels, spec, opt)
		if err != nil {
			return err
		}
		if b.SchemaID != a.SchemaID {
			return fmt.Errorf("batch %s is of schema %s and batch %s of %s: a comparison needs one schema", a.ID, a.SchemaID, b.ID, b.SchemaID)
		}
		reports = append(reports, b)
		cmp = eval.Compare(a, b)
	}
	if !o.noSave {
		for _, r := range reports {
			if _, err := eval.Save(ctx, st, st.Pool, r, save); err != nil {
				return err
			}
		}
	}
	var qaEst []store.QAEstimate
	if o.qa {
		if qaEst, err = st.QAFieldEstimates(ctx, st.Pool, a.SchemaID); err != nil {
			return err
		}
	}
	switch {
	case o.json && cmp != nil:
		return writeJSON(w, map[string]any{"a": a, "b": reports[1], "comparison": cmp})
	case o.json && o.qa:
		return writeJSON(w, map[string]any{"eval": a, "qa_estimates": qaEst})
	case o.json:
		return writeJSON(w, a)
	case cmp != nil:
		return cmp.WriteTable(w)
	}
	if err := a.WriteTable(w); err != nil || !o.qa {
		return err
	}
	fmt.Fprintln(w)
	return eval.WriteQAEstimates(w, qaEst)
}

// batchToScore returns the batch run (without -batch) evaluates: the
// newest batch with messages ingested from -source (by default the
// labels file), of schema -schema when it is given, or, with -run or
// when there is none, the batch o.ingest runs of that file.
func batchToScore(ctx context.Context, st *store.Store, cfg *config.Config, o options) (string, error) {
	src := o.source
	if src == "" {
		src = o.labels
	}
	if !o.run {
		batch, err := st.BatchLatest(ctx, st.Pool, src, o.schema)
		if err == nil || !errors.Is(err, store.ErrNotFound) {
			return batch, err
		}
		if o.ingest == nil {
			of := ""
			if o.schema != "" {
				of = " of schema " + o.schema
			}
			return "", fmt.Errorf("no batch%s with messages was ingested from %s: name one with -batch, or -source FILE", of, src)
		}
	}
	if o.ingest == nil {
		return "", errors.New("-run: cannot ingest here")
	}
	schemaID := o.schema
	if schemaID == "" {
		schemaID = cfg.DefaultSchema().ID
	}
	if _, ok := cfg.SchemaByID(schemaID); !ok {
		return "", fmt.Errorf("-schema %q is not in the configuration", schemaID)
	}
	return o.ingest(ctx, src, schemaID)
}

func evaluate(ctx context.Context, st *store.Store, cfg *config.Config, o options, batchID string, labels []eval.Label, spec eval.Spec, opt eval.Options) (*eval.Report, error) {
	b, preds, err := eval.LoadBatch(ctx, st, st.Pool, batchID)
	if errors.Is(err, store.ErrNotFound) {
		return nil, fmt.Errorf("batch %s: no such batch", batchID)
	} else if err != nil {
		return nil, err
	}
	schema, err := loadSchema(cfg, b, o.schemaFile)
	if err != nil {
		return nil, err
	}
	fields, err := eval.Fields(schema, spec)
	if err != nil {
		return nil, err
	}
	sc, err := eval.Score(schema, fields, labels, preds, opt)
	if _, ok := errors.AsType[*eval.LabelError](err); ok && o.qa {
		return nil, fmt.Errorf("QA labels of batch %s: %w", batchID, err)
	} else if ok {
		return nil, fmt.Errorf("%s: %w", o.labels, err)
	} else if err != nil {
		return nil, err
	}
	if sc.Matched == 0 {
		return nil, fmt.Errorf("batch %s: no label line matches one of its %d messages (by id, and source when the line gives one)", batchID, len(preds))
	}
	return eval.NewReport(b, sc, opt), nil
}

// loadSchema returns the schema the batch ran with: file when given, else
// the embedded file of its id and version, else the configured file.
func loadSchema(cfg *config.Config, b eval.Batch, file string) (*pipeline.Schema, error) {
	if file != "" {
		return pipeline.LoadSchema(schemas.FS, b.SchemaID, file)
	}
	if len(b.SchemaVersions) == 1 {
		name := b.SchemaID + ".v" + b.SchemaVersions[0] + ".json"
		if _, err := schemas.FS.Open(name); err == nil {
			return pipeline.LoadSchema(schemas.FS, b.SchemaID, name)
		}
	}
	for _, sc := range cfg.Schemas {
		if sc.ID == b.SchemaID {
			return pipeline.LoadSchema(schemas.FS, sc.ID, sc.File)
		}
	}
	return nil, fmt.Errorf("batch %s: schema %s is not configured and not embedded: name its file with -schema-file", b.ID, b.SchemaID)
}

func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

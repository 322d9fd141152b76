// Command qalabel reviews the open QA samples (docs/triage.md, "The QA
// queue") from a labels file, as a reviewer who knew the labels would:
// a field is marked right when the record's value scores as exact
// against the label (eval's semantics: normalisation, the grounding
// rule), else wrong with the expected value as its fix; fields the label
// lacks get no verdict, and samples of unlabelled messages are left open.
// It is a stand-in for people, to measure the QA tools on the bundled
// sample; figures it makes of a simulator batch are simulator figures.
//
// Usage:
//
//	qalabel [-labels testdata/abcd/messages.jsonl] [-spec testdata/abcd/eval.yaml] [-schema customer_message] [-reviewer qalabel]
//
// It reads DATABASE_URL and CONFIG, and prints how many samples it
// reviewed and how many fields it marked wrong. Run it from the
// repository root for the default files.
package main

import (
	"bytes"
	"flag"
	"fmt"
	"os"

	"go.uber.org/zap"

	"github.com/extractq/extractq/eval"
	"github.com/extractq/extractq/internal/startup"
	"github.com/extractq/extractq/pipeline"
	"github.com/extractq/extractq/schemas"
	"github.com/extractq/extractq/store"
)

func main() {
	labelsFile := flag.String("labels", "testdata/abcd/messages.jsonl", "labelled JSONL (docs/eval.md)")
	specFile := flag.String("spec", "testdata/abcd/eval.yaml", "eval spec file; empty for the schema's own")
	schemaID := flag.String("schema", "customer_message", "the schema whose open samples are reviewed")
	reviewer := flag.String("reviewer", "qalabel", "the reviewer recorded with each review")
	flag.Parse()
	if err := run(*labelsFile, *specFile, *schemaID, *reviewer); err != nil {
		fmt.Fprintln(os.Stderr, "qalabel:", err)
		os.Exit(1)
	}
}

func run(labelsFile, specFile, schemaID, reviewer string) error {
	env := startup.ReadEnv()
	cfg, err := startup.LoadConfig(env.Config, env)
	if err != nil {
		return err
	}
	sc, ok := cfg.SchemaByID(schemaID)
	if !ok {
		return fmt.Errorf("-schema %q is not in the configuration", schemaID)
	}
	schema, err := pipeline.LoadSchema(schemas.FS, sc.ID, sc.File)
	if err != nil {
		return err
	}
	raw, err := os.ReadFile(labelsFile)
	if err != nil {
		return err
	}
	labels, err := eval.ReadLabels(bytes.NewReader(raw))
	if err != nil {
		return fmt.Errorf("%s: %w", labelsFile, err)
	}
	var spec eval.Spec
	if specFile != "" {
		if spec, err = eval.ReadSpecFile(specFile); err != nil {
			return err
		}
	}
	fields, err := eval.Fields(schema, spec)
	if err != nil {
		return err
	}
	byKey := map[[2]string]eval.Label{}
	byID := map[string]eval.Label{}
	for _, l := range labels {
		byKey[[2]string{l.Source, l.ID}] = l
		if l.Source == "" {
			byID[l.ID] = l
		}
	}
	ctx, stop := startup.Context()
	defer stop()
	st, err := store.Open(ctx, env.DatabaseURL, zap.NewNop())
	if err != nil {
		return err
	}
	defer st.Close()
	open, err := st.QASampleList(ctx, st.Pool, store.QASampleListParams{SchemaID: schemaID, Status: store.QAOpen, Limit: 1 << 20})
	if err != nil {
		return err
	}
	reviewed, wrong, unlabelled := 0, 0, 0
	for _, s := range open {
		l, ok := byKey[[2]string{s.Source, s.ExternalID}]
		if !ok {
			l, ok = byID[s.ExternalID]
		}
		if !ok {
			unlabelled++
			continue
		}
		d, err := st.QASampleGet(ctx, st.Pool, s.ID)
		if err != nil {
			return err
		}
		vs, err := eval.VerdictsFromLabel(schema, fields, l, d.Record, d.Text, eval.Options{})
		if err != nil {
			return err
		}
		if len(vs) == 0 {
			unlabelled++
			continue
		}
		if err := st.QASampleReview(ctx, st.Pool, store.QASampleReviewParams{ID: s.ID, Reviewer: reviewer, Via: store.ViaCLI, Verdicts: vs}); err != nil {
			return err
		}
		reviewed++
		for _, v := range vs {
			if !v.Correct {
				wrong++
			}
		}
	}
	fmt.Printf("qalabel: reviewed %d of %d open QA samples of %s from %s (%d fields marked wrong); %d left open without a label\n",
		reviewed, len(open), schemaID, labelsFile, wrong, unlabelled)
	return nil
}

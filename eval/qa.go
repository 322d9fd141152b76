package eval

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"github.com/extractq/extractq/pipeline"
	"github.com/extractq/extractq/store"
)

// QALabels returns the labels the QA reviews of batch batchID's runs make
// (store.QALabels), one line per reviewed sample whose record is still
// stored: the expected value of each field with a verdict is the record's
// own when the reviewer marked it right, and the reviewer's fix when
// wrong; fields without a verdict are unlabelled. The lines carry the
// message text, so grounded fields follow the usual rule (an expected
// value not in the text is expected null). It returns the labels and
// their JSON Lines (as ReadLabels reads them, for the evaluation's
// record of its labels). The labels cover the sampled records only, and
// unweighted: the false-accept estimate weighted for the strata is
// qa_field_estimates'.
func QALabels(ctx context.Context, st *store.Store, db store.DBTX, batchID string) ([]Label, []byte, error) {
	samples, err := st.QALabels(ctx, db, batchID)
	if err != nil {
		return nil, nil, err
	}
	var buf bytes.Buffer
	for _, s := range samples {
		var rec map[string]json.RawMessage
		if err := json.Unmarshal(s.Record, &rec); err != nil {
			return nil, nil, fmt.Errorf("QA sample %d: the record is not an object: %w", s.SampleID, err)
		}
		exp := map[string]json.RawMessage{}
		for _, v := range s.Verdicts {
			name, ok := topField(v.Path)
			if !ok {
				continue
			}
			switch {
			case v.Correct && rec[name] != nil:
				exp[name] = rec[name]
			case v.Correct:
				exp[name] = json.RawMessage(`null`)
			case len(v.Fixed) > 0:
				exp[name] = v.Fixed
			default:
				exp[name] = json.RawMessage(`null`)
			}
		}
		line, err := json.Marshal(map[string]any{"id": s.ExternalID, "source": s.Source, "text": s.Text, "expected": exp, "qa_sample": s.SampleID})
		if err != nil {
			return nil, nil, err
		}
		buf.Write(line)
		buf.WriteByte('\n')
	}
	if buf.Len() == 0 {
		return nil, nil, fmt.Errorf("batch %s: no reviewed QA sample with its record: review some in the QA queue (docs/triage.md)", batchID)
	}
	labels, err := ReadLabels(bytes.NewReader(buf.Bytes()))
	if err != nil {
		return nil, nil, fmt.Errorf("QA labels of batch %s: %w", batchID, err)
	}
	return labels, buf.Bytes(), nil
}

// topField returns the property name of a top-level JSON Pointer such as
// "/order_id" (RFC 6901 escapes undone); false for a deeper one.
func topField(p string) (string, bool) {
	if !strings.HasPrefix(p, "/") || strings.Contains(p[1:], "/") {
		return "", false
	}
	return strings.ReplaceAll(strings.ReplaceAll(p[1:], "~1", "/"), "~0", "~"), true
}

// WriteQAEstimates writes the false-accept estimates of the QA reviews
// (store.QAFieldEstimates) as a terminal table: per cohort and field, the
// samples reviewed, those marked wrong, and the weighted rate in percent
// with its 95% interval on the effective sample size. A cohort of the
// simulator's model is labelled as simulator figures.
func WriteQAEstimates(w io.Writer, est []store.QAEstimate) error {
	fmt.Fprintln(w, "False accepts from the QA reviews (qa_field_estimates): weighted by the inverse of each sample's share; Wilson 95% interval on the effective n")
	if len(est) == 0 {
		_, err := fmt.Fprintln(w, "no QA sample reviewed yet")
		return err
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	last := ""
	for _, e := range est {
		cohort := fmt.Sprintf("schema %s v%s, prompt %s, model %s", e.SchemaID, e.SchemaVersion, e.PromptVersion, e.Model)
		if cohort != last {
			if err := tw.Flush(); err != nil {
				return err
			}
			if IsSimulator(e.Model) {
				cohort = "SIMULATOR FIGURES (" + cohort + "): they describe the LLM simulator's heuristics and settings, not a model"
			}
			fmt.Fprintln(w, cohort)
			fmt.Fprintln(tw, "field\treviewed\twrong\tfalse accepts % [95%]\teffective n\t")
			last = fmt.Sprintf("schema %s v%s, prompt %s, model %s", e.SchemaID, e.SchemaVersion, e.PromptVersion, e.Model)
		}
		fmt.Fprintf(tw, "%s\t%d\t%d\t%.1f [%.1f–%.1f]\t%.1f\t\n", e.Field, e.Reviewed, e.Wrong, 100*e.FalseAcceptRate, 100*e.Low, 100*e.High, e.EffectiveN)
	}
	return tw.Flush()
}

// VerdictsFromLabel returns the verdicts a reviewer who knew label l
// would give record (a sample's validated record of l's message): per
// field of fields that l labels, right when the record's value scores as
// exact against the label (TP or TN, with the fields' normalisation and
// the grounding rule of Score), else wrong, fixed with the expected value
// (null when expected null). It is the stand-in for people that measures
// the QA tools on labelled data (devtools/cmd/qalabel); text is the
// message text, for grounding when l gives none.
func VerdictsFromLabel(schema *pipeline.Schema, fields []Field, l Label, record json.RawMessage, text string, opt Options) ([]store.QAVerdict, error) {
	var rec map[string]any
	if err := unmarshalNumber(record, &rec); err != nil {
		return nil, fmt.Errorf("eval: record of message %q: %w", l.ID, err)
	}
	if l.Text != "" {
		text = l.Text
	}
	var out []store.QAVerdict
	for _, f := range fields {
		exp, ok := l.Expected[f.Name]
		if !ok {
			continue
		}
		if f.Grounded && !opt.RawLabels && exp != nil && !inText(schema, f.Name, exp, l, text) {
			exp = nil
		}
		v := store.QAVerdict{Path: "/" + strings.ReplaceAll(strings.ReplaceAll(f.Name, "~", "~0"), "/", "~1"),
			Correct: outcome(f.canon(exp), f.canon(rec[f.Name])).Correct()}
		if !v.Correct {
			fix, err := json.Marshal(exp)
			if err != nil {
				return nil, err
			}
			v.Fixed = fix
		}
		out = append(out, v)
	}
	return out, nil
}

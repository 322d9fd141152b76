package eval

import (
	"bytes"
	"encoding/json"
	"fmt"
	"sort"

	"github.com/extractq/extractq/pipeline"
)

// Outcome is how one field of one message scored.
type Outcome uint8

// The outcomes. Wrong counts as one false positive and one miss.
const (
	Unlabelled Outcome = iota // not scored
	TP                        // the expected value
	TN                        // null, as expected
	FN                        // null where a value is expected: a miss
	FP                        // a value where null is expected
	Wrong                     // another value than the expected one
)

// Correct reports an exact match: TP or TN.
func (o Outcome) Correct() bool { return o == TP || o == TN }

// Prediction is one message of a batch as eval reads it.
type Prediction struct {
	ExternalID string
	Source     string
	// Status is its latest run's in the batch (store.RunSucceeded, ...).
	Status string
	// Record is the model's validated record of that run; nil when the run
	// has none (failed, queued, or a reviewer's record).
	Record json.RawMessage
	// Text is the message text ("" once erased), used for grounding when
	// a label gives neither "expected_in_text" nor "text".
	Text string
}

// Options change how labels are read.
type Options struct {
	// RawLabels scores grounded fields against the label as given, even
	// when the expected value is not in the text.
	RawLabels bool
	// IgnoreSource matches label lines on their id only, whatever source
	// they give: for a batch that ingested the labelled messages again
	// under another source (to run another version on them).
	IgnoreSource bool
}

// Scored is the outcome of every labelled message (a row per label line
// matched to a message of the batch) and field.
type Scored struct {
	Fields []Field
	// Keys are the matched label lines, as "source\x00id" of the line
	// (the source "" under IgnoreSource), in label order; Outcomes[i][j]
	// is field j of Keys[i]. Compare pairs two batches on them.
	Keys     []string
	Outcomes [][]Outcome
	// Labels is the number of label lines; Matched those that matched a
	// message of the batch; NoRecord the matched messages without a model
	// record.
	Labels, Matched, NoRecord int
	// NotInSchema lists the label keys the schema has no property for
	// (not scored), sorted.
	NotInSchema []string
}

// Score scores the batch's predictions against labels. A label line
// matches the prediction with its id as external id and, when the line
// gives a source, that source. schema grounds values for label lines
// without "expected_in_text" (the line's text, else the stored text).
// A labelled value the schema makes impossible (a type or an enum value
// no valid record holds), or an id matching two messages, is a
// *LabelError.
func Score(schema *pipeline.Schema, fields []Field, labels []Label, preds []Prediction, opt Options) (*Scored, error) {
	if err := checkLabels(fields, labels); err != nil {
		return nil, err
	}
	byID := map[string][]int{}
	for i, p := range preds {
		byID[p.ExternalID] = append(byID[p.ExternalID], i)
	}
	known := map[string]bool{}
	for _, f := range fields {
		known[f.Name] = true
	}
	extra := map[string]bool{}
	sc := &Scored{Fields: fields, Labels: len(labels)}
	for _, l := range labels {
		for k := range l.Expected {
			if !known[k] {
				extra[k] = true
			}
		}
		pi := -1
		for _, i := range byID[l.ID] {
			if l.Source == "" || opt.IgnoreSource || preds[i].Source == l.Source {
				if pi >= 0 {
					return nil, &LabelError{Line: l.Line, ID: l.ID, Msg: "the id matches more than one message of the batch (give the line a source)"}
				}
				pi = i
			}
		}
		if pi < 0 {
			continue
		}
		p := preds[pi]
		var rec map[string]any
		if p.Record != nil {
			if err := unmarshalNumber(p.Record, &rec); err != nil {
				return nil, fmt.Errorf("eval: record of message %q: %w", p.ExternalID, err)
			}
		} else {
			sc.NoRecord++
		}
		text := l.Text
		if text == "" {
			text = p.Text
		}
		row := make([]Outcome, len(fields))
		for j, f := range fields {
			exp, ok := l.Expected[f.Name]
			if !ok {
				continue
			}
			if f.Grounded && !opt.RawLabels && exp != nil && !inText(schema, f.Name, exp, l, text) {
				exp = nil
			}
			row[j] = outcome(f.canon(exp), f.canon(rec[f.Name]))
		}
		src := l.Source
		if opt.IgnoreSource {
			src = ""
		}
		sc.Keys = append(sc.Keys, src+"\x00"+l.ID)
		sc.Outcomes = append(sc.Outcomes, row)
		sc.Matched++
	}
	for k := range extra {
		sc.NotInSchema = append(sc.NotInSchema, k)
	}
	sort.Strings(sc.NotInSchema)
	return sc, nil
}

func outcome(exp, got string) Outcome {
	switch {
	case exp == "" && got == "":
		return TN
	case exp == "":
		return FP
	case got == "":
		return FN
	case exp == got:
		return TP
	}
	return Wrong
}

// inText reports whether the expected value of a grounded field occurs in
// the text: from the line's "expected_in_text" when it has one, else by
// the schema's grounding rule on text.
func inText(schema *pipeline.Schema, name string, exp any, l Label, text string) bool {
	if l.InText != nil {
		return l.InText[name]
	}
	errs, _ := schema.Ground(map[string]any{name: exp}, text)
	return len(errs) == 0
}

func unmarshalNumber(b []byte, v any) error {
	d := json.NewDecoder(bytes.NewReader(b))
	d.UseNumber()
	return d.Decode(v)
}

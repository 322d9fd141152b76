package eval

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
)

// Provenance is the line that says what a batch's figures describe: the
// simulator's settings when it ran on the simulator.
func (b Batch) Provenance() string {
	v := fmt.Sprintf("model %s, prompt %s, schema %s v%s", join(b.Models), join(b.PromptVersions), b.SchemaID, join(b.SchemaVersions))
	if b.Simulated {
		return "SIMULATOR FIGURES (" + v + "): they describe the LLM simulator's heuristics and settings, not a model"
		// the same words as SimulatorNote, in capitals where a table starts
	}
	return v
}

func join(s []string) string {
	if len(s) == 0 {
		return "-"
	}
	return strings.Join(s, ",")
}

func pct(m Metric) string {
	if !m.Defined {
		return "-"
	}
	return fmt.Sprintf("%.1f [%.1f–%.1f]", 100*m.Value, 100*m.Low, 100*m.High)
}

// WriteTable writes r as a terminal table: one row per field, the counts
// and each metric in percent with its 95% interval.
func (r *Report) WriteTable(w io.Writer) error {
	fmt.Fprintf(w, "Eval of batch %s: %d label lines, %d matched, %d without a model record\n", r.ID, r.Labels, r.Matched, r.NoRecord)
	fmt.Fprintln(w, r.Provenance())
	if r.RawLabels {
		fmt.Fprintln(w, "grounded fields scored against the raw labels (-raw-labels)")
	} else {
		fmt.Fprintln(w, "grounded fields (g): an expected value not in the text is expected null")
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "field\tg\tn\ttp\tfp\tfn\ttn\tprecision % [95%]\trecall % [95%]\tF1 % [95%]\texact % [95%]\t")
	for _, f := range r.Fields {
		g := ""
		if f.Grounded {
			g = "g"
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%d\t%d\t%d\t%s\t%s\t%s\t%s\t\n", f.Field, g, f.N, f.TP, f.FP, f.FN, f.TN,
			pct(f.Precision), pct(f.Recall), pct(f.F1), pct(f.Exact))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if len(r.NotInSchema) > 0 {
		fmt.Fprintf(w, "label keys not in the schema (not scored): %s\n", strings.Join(r.NotInSchema, ", "))
	}
	return nil
}

// WriteTable writes c as a terminal table: per field, A's and B's exact
// match and F1, B less A, the discordant pairs and McNemar's p.
func (c *Comparison) WriteTable(w io.Writer) error {
	fmt.Fprintf(w, "A: batch %s: %s\n", c.A.ID, c.A.Provenance())
	fmt.Fprintf(w, "B: batch %s: %s\n", c.B.ID, c.B.Provenance())
	fmt.Fprintf(w, "%d paired messages; * marks a difference outside the noise (McNemar exact, Holm over fields, alpha %.2f)\n", c.Paired, Alpha)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "field\tn\texact A %\texact B %\tB-A pts\tF1 A %\tF1 B %\tF1 B-A pts [95%]\tonly A\tonly B\tp\t\t")
	for _, d := range c.Fields {
		mark := ""
		if d.Significant {
			mark = "*"
		}
		f1d := "-"
		if d.F1Diff.Defined {
			f1d = fmt.Sprintf("%+.1f [%+.1f, %+.1f]", 100*d.F1Diff.Value, 100*d.F1Diff.Low, 100*d.F1Diff.High)
		}
		fmt.Fprintf(tw, "%s\t%d\t%.1f\t%.1f\t%+.1f\t%s\t%s\t%s\t%d\t%d\t%.3g\t%s\t\n", d.Field, d.N,
			100*d.ExactA.Value, 100*d.ExactB.Value, 100*d.ExactDiff, one(d.F1A), one(d.F1B), f1d, d.OnlyA, d.OnlyB, d.P, mark)
	}
	return tw.Flush()
}

func one(m Metric) string {
	if !m.Defined {
		return "-"
	}
	return fmt.Sprintf("%.1f", 100*m.Value)
}

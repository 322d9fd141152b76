package conformance

import (
	"fmt"
	"strings"
)

// Table returns the conformance table as Markdown: one table for the
// matched targets and one for the mismatches, a row per case, a column
// per target, each cell the case's Expect on that target (Expect.Cell:
// outcome, kind, calls the server answered, note) or "—" with the
// feature the target lacks. It is computed from the cases' expectations,
// which TestProviders asserts, so it holds what the suite checks.
func Table(targets []Target, cases []Case) string {
	var matched, mismatched []Target
	for _, tg := range targets {
		if tg.Matched() {
			matched = append(matched, tg)
		} else {
			mismatched = append(mismatched, tg)
		}
	}
	var b strings.Builder
	b.WriteString("Matched: the worker's `llm.provider` is the server the simulator's profile plays.\n\n")
	writeTable(&b, matched, cases, true)
	b.WriteString("\nMismatches: the worker set for one server (first) talking to another (second).\n\n")
	writeTable(&b, mismatched, cases, false)
	return b.String()
}

func writeTable(b *strings.Builder, targets []Target, cases []Case, what bool) {
	b.WriteString("| case |")
	sep := "| --- |"
	if what {
		b.WriteString(" what |")
		sep += " --- |"
	}
	for _, tg := range targets {
		name := string(tg.Profile)
		if !tg.Matched() {
			name = tg.Provider + " on " + string(tg.Profile)
		}
		fmt.Fprintf(b, " %s |", name)
		sep += " --- |"
	}
	b.WriteString("\n" + sep + "\n")
	for _, c := range cases {
		fmt.Fprintf(b, "| %s |", c.Name)
		if what {
			fmt.Fprintf(b, " %s |", strings.ReplaceAll(c.What, "|", `\|`))
		}
		for _, tg := range targets {
			fmt.Fprintf(b, " %s |", Cell(tg, c))
		}
		b.WriteString("\n")
	}
}

// Cell is case c's cell on target tg in the table.
func Cell(tg Target, c Case) string {
	env := NewEnv(tg, c.Mode)
	if c.Needs != nil {
		if f := c.Needs(env); f != "" {
			return "— (no " + f + ")"
		}
	}
	return c.Expect(env).Cell()
}

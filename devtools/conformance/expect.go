package conformance

import (
	"fmt"
	"strings"

	"github.com/extractq/extractq/extracttype"
)

// Outcome is how a case's run ends.
type Outcome string

// The outcomes. Nak is a run the worker put back without an outcome (a
// nak, or a requeue as a new message, which spends no delivery): not in
// triage, still queued, delivered again later.
const (
	Succeeded Outcome = "succeeded"
	Repaired  Outcome = "repaired"
	Failed    Outcome = "failed"
	Nak       Outcome = "nak"
)

// Row is one row the run must leave in the ledger (llm_calls), in
// attempt order.
type Row struct {
	Purpose string // "extract" or "repair"
	Finish  string // the finish_reason stored
	// Superseded marks a paid call of a delivery that did not decide the
	// run (it was nak'ed), booked on its own.
	Superseded bool
	// Estimated marks a call whose reply said nothing of its usage: its
	// tokens are the worker's estimates (usage_estimated).
	Estimated bool
}

func (r Row) String() string {
	s := r.Purpose + ":" + r.Finish
	if r.Superseded {
		s += ":superseded"
	}
	if r.Estimated {
		s += ":estimated"
	}
	return s
}

// Expect is what one case must do on one target.
type Expect struct {
	Outcome Outcome
	// Kind is the triage reason of a failed run.
	Kind extracttype.Kind
	// Calls is how many chat requests the server answered, retries
	// included.
	Calls int
	// Ledger is the rows of llm_calls the run leaves, in attempt order.
	Ledger []Row
	// Note says why, in a few words, when the outcome depends on what the
	// target does ("prevented", "cap ignored"); it is shown in the table.
	Note string
}

// Cell is the expectation as the conformance table prints it:
// "repaired (2)", "failed: truncated (1)", "nak (3)", with the note.
func (x Expect) Cell() string {
	s := string(x.Outcome)
	if x.Outcome == Failed {
		s += ": " + string(x.Kind)
	}
	s += fmt.Sprintf(" (%d)", x.Calls)
	if x.Note != "" {
		s += ", " + x.Note
	}
	return s
}

// rows builds a ledger from "purpose:finish" pairs, each followed by
// the marks ":superseded" and ":estimated" where they apply.
func rows(specs ...string) []Row {
	out := make([]Row, 0, len(specs))
	for _, spec := range specs {
		parts := strings.Split(spec, ":")
		if len(parts) < 2 {
			panic("conformance: ledger row " + spec + " is not purpose:finish")
		}
		r := Row{Purpose: parts[0], Finish: parts[1]}
		for _, mark := range parts[2:] {
			switch mark {
			case "superseded":
				r.Superseded = true
			case "estimated":
				r.Estimated = true
			default:
				panic("conformance: ledger row " + spec + ": unknown mark " + mark)
			}
		}
		out = append(out, r)
	}
	return out
}

// The expectations most cases share.

func succeeded(e Env, note string) Expect {
	return Expect{Outcome: Succeeded, Calls: 1, Ledger: rows("extract:" + stopOf(e)), Note: note}
}

func repaired(e Env, note string) Expect {
	return Expect{Outcome: Repaired, Calls: 2, Ledger: rows("extract:"+stopOf(e), "repair:"+stopOf(e)), Note: note}
}

func failed(kind extracttype.Kind, finish string, note string) Expect {
	return Expect{Outcome: Failed, Kind: kind, Calls: 1, Ledger: rows("extract:" + finish), Note: note}
}

// stopOf is the finish reason of a complete reply: tool_calls in tools
// mode, else stop.
func stopOf(e Env) string {
	if e.Tools() {
		return "tool_calls"
	}
	return "stop"
}

// preventedOr is the expectation of a first-reply fault that breaks the
// structure: a server that enforces the schema cannot send it (the honest
// record comes instead, valid at once); another sends it and the one
// repair fixes it.
// severalCallsOr is what a second call of the forced tool comes to: none
// where the worker sends parallel_tool_calls false to a server that reads
// it (the server answers one call), else a tool error repaired once.
func severalCallsOr(e Env) Expect {
	if e.Worker.NoParallelToolCalls && e.Server.ParallelToolCalls {
		return succeeded(e, "prevented (parallel_tool_calls false)")
	}
	return repaired(e, "")
}

func preventedOr(e Env) Expect {
	if e.Enforced() {
		return succeeded(e, "prevented")
	}
	return repaired(e, "")
}

package conformance

import (
	"fmt"
	"strings"

	"github.com/extractq/extractq/extracttype"
)

// Outcome is how a case's run ends.
type Outcome string

// The outcomes. Nak is a run the worker nak'ed without an outcome: not in
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
	// Unbooked is how many of the calls the server answered with 200
	// (paid) are not in the ledger: a known gap, 0 where none.
	Unbooked int
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

// rows builds a ledger from "purpose:finish" pairs.
func rows(pairs ...string) []Row {
	out := make([]Row, 0, len(pairs))
	for _, p := range pairs {
		purpose, finish, ok := strings.Cut(p, ":")
		if !ok {
			panic("conformance: ledger row " + p + " is not purpose:finish")
		}
		out = append(out, Row{Purpose: purpose, Finish: finish})
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
func preventedOr(e Env) Expect {
	if e.Enforced() {
		return succeeded(e, "prevented")
	}
	return repaired(e, "")
}

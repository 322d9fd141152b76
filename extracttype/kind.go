package extracttype

// Kind is the class of a validation or extraction failure. Each decides
// what the pipeline does next (see pipeline's package doc, "Errors", and
// docs/extraction.md, "Errors and kinds").
type Kind string

// The error kinds. parse, schema, rule and tool are repaired once; the
// others fail the run at once.
const (
	KindParse        Kind = "parse"         // no JSON object in the reply
	KindSchema       Kind = "schema"        // a JSON Schema keyword failed
	KindRule         Kind = "rule"          // a semantic rule failed, such as grounded
	KindTool         Kind = "tool"          // no tool call, a wrong tool name, several calls
	KindTruncated    Kind = "truncated"     // finish_reason length
	KindRefusal      Kind = "refusal"       // the model refused, or content_filter
	KindPatchInvalid Kind = "patch_invalid" // a repair patch that cannot be applied
	KindBudget       Kind = "budget"        // the next call would break the message's budget
	KindInput        Kind = "input"         // empty message, one over the context window, or a schema not configured
	KindTransport    Kind = "transport"     // the provider refused the request itself (bad_request); never retried
	KindDelivery     Kind = "delivery"      // queue delivery limit reached: the provider or the worker failed on every delivery
	// KindHeld is not an error of the record: a review rule (x-review)
	// held a valid record for a person. It names the rule (keyword) on
	// a held run's triage item; it is never in a call's error list, never
	// repaired and never a failure event.
	KindHeld Kind = "held"
)

// Repairable reports whether an error of kind k is sent back to the model
// for the one repair.
func (k Kind) Repairable() bool {
	switch k {
	case KindParse, KindSchema, KindRule, KindTool:
		return true
	}
	return false
}

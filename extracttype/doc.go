// Package extracttype holds the plain data types of an extraction that
// several of the product's packages share: the error kinds, the typed
// error list and grounding evidence. It is a leaf, as river's rivertype is:
// it imports only the standard library, so that store (which writes these
// types to Postgres) and queue (which announces them on NATS) can use them
// without compiling in the extraction engine, its LLM client and the
// provider's resilience layer.
//
// # Who makes them, who reads them
//
// The pipeline package makes them: its validator, grounding rule, reply
// parser and budget check each return an [ErrorList], and a valid record
// comes with its [Evidence]. The worker stores them with the run's
// outcome (store), announces a failed run's list (queue), and the triage
// UI shows them to reviewers, highlighting the failing fields and the
// grounded values in the message text.
//
// # Errors
//
// Every failure, wherever it comes from, is one [Error]: a [Kind], a field
// path (a JSON Pointer to the field as the reader means it), a JSON Schema
// keyword or rule name, and a short message that never carries the
// customer's values (DESIGN.md "Errors"). The same records make the repair
// prompt, the triage view and the failure-analytics rows, which fold array
// indices with [Error.PathPattern]. An [ErrorList] is an error itself, so
// it can travel through error returns; its zero value means valid.
//
// # Evidence
//
// [Evidence] locates a grounded value in the message text by Unicode
// code-point offsets into the stored text (DESIGN.md fixes the unit), which
// the triage UI turns into highlighted spans.
package extracttype

// Package llmsim is the extractq LLM simulator — not a model. It serves the
// OpenAI chat completions API well enough for the product's tests, its
// offline demo and its benchmarks, where no LLM is reachable: it fills the
// requested JSON Schema from the customer message with plain heuristics and
// injects the faults real models make, at seeded rates.
//
// # Endpoints
//
// New returns an http.Handler serving:
//
//   - POST /v1/chat/completions: the OpenAI wire format as
//     github.com/sashabaranov/go-openai sends and parses it. One choice,
//     no streaming (stream: true is a 400).
//   - GET /v1/models: one model, DefaultModel. Chat calls accept any model
//     name and echo it.
//   - GET /healthz: {"status":"ok","simulator":true}.
//
// Bad requests get a 400 with an OpenAI error body,
// {"error":{"message","type":"invalid_request_error","param","code"}}; an
// unknown URL a 404 and a wrong method a 405 of the same shape.
// Server.ListenAndServe runs the handler until its context is done and
// shuts down gracefully; cmd/llmsim wraps it.
//
// # What the reply fills
//
// With tools, the reply is one tool call to the tool named in tool_choice
// (or the only tool), its arguments a JSON string, and finish_reason
// "tool_calls". Otherwise, with response_format {type: json_schema}, the
// content is the JSON. Without either the content is "{}".
//
// The message text is the block between the lines "<message>" and
// "</message>" of the extraction turn (the last user turn before any
// assistant turn), as the product's prompt writes it; without such a block
// it is that turn's whole content.
//
// # Honest filling
//
// The record is filled from the text, generically over the schema:
// properties of nested objects, arrays, "type" as a string or a list such
// as ["string","null"], $ref within the document ($defs, definitions),
// anyOf / oneOf (the first non-null branch) and allOf. No value is ever
// invented: what is not found is null where the schema allows it, left out
// where it is optional, and otherwise an empty-ish placeholder (the enum's
// "other" / "unknown" / first value, "", 0 or the minimum, false, [], an
// object of such).
//
//   - Strings with a "pattern": whole-token matches of the pattern with its
//     ^ and $ anchors removed. A match is taken when a field keyword (the
//     property name's words, or an "x-keywords" list) introduces it on the
//     same line ("account id is U85ALFLG2Z", "Zip: 12818"), or by its shape
//     alone when the pattern demands at least six characters and the match
//     holds a digit (order ids, account ids). Patterns that admit free text
//     ("[^0-9@]+", "\\S.*") are used only to check values, never to find
//     them. When sibling fields match the same token it goes to the better
//     introduced one, then to the narrower pattern.
//   - "format": "email": the first e-mail address.
//   - "x-hint": a regular expression (Go syntax) whose first group, or whole
//     match, is the value; it also fills numbers and, by matching, booleans.
//     Plain strings and numbers without a pattern or hint are null.
//   - "enum": keyword scoring. Each value scores the occurrences of its
//     words (underscores split) and, twice, of its "x-keywords" phrases
//     (an object mapping value to a list of phrases); words of four letters
//     or more match any ending. The best value wins; when nothing scores,
//     null if allowed, else the catch-all or first value.
//   - Arrays of objects get one element per match of their key property
//     (the first required property that can be searched for), each filled
//     from the line holding that match. When no property can be searched
//     for, the first string enum property (in "required" order, then the
//     others) with a value named in full, or by one of its x-keywords
//     phrases, keys them instead: one element per distinct value named, in
//     text order ("the Guess Jeans are stained" gives {"product":"guess
//     jeans","problem":"stain",...}). Arrays of enum values get every value
//     named in full; arrays of searchable scalars every distinct match.
//   - "minimum" / "maximum", "minLength" / "maxLength" and "maxItems" filter
//     what is taken.
//
// The product strips "x-" annotations before it sends a schema, so against
// the product the simulator sees patterns, formats and enum words only.
//
// # Faults
//
// The first (extraction) reply gets at most one fault, drawn with the
// config.Simulator rates in this order (cumulative; the earlier win when
// they add up to more than 1):
//
//   - invalid_json: not JSON at all (single quotes and Python literals, or
//     bare keys and a trailing comma).
//   - fenced: valid JSON inside a ```json code fence.
//   - prose: "Here is the record: {...} Hope this helps."
//   - wrong_type: one scalar field, maybe nested (/items/0/qty), given a
//     JSON type its schema does not allow: "7149958247" becomes a number, a
//     word a one-element array, a number a string.
//   - missing_required: one required property, maybe nested, left out.
//   - ungrounded: one grounded field ("x-grounded": true; without
//     annotations, a searchable string named like an id: order_id, email,
//     phone, ...) set to a made-up value of the right shape (its pattern,
//     its format, the shape of the honest value) whose normal form does not
//     occur in the text, so only the grounding rule catches it.
//   - truncated: the reply cut at a random point in its middle, with
//     finish_reason "length".
//
// Faults apply alike to content and to tool call arguments. A reply longer
// than max_completion_tokens (or max_tokens) is also cut, with
// finish_reason "length".
//
// Replies are deterministic: every random choice comes from a generator
// seeded with a hash of config.Simulator.Seed, the request's seed (if
// sent), the attempt number and the message text. The same inputs give the
// same reply; nothing uses the global generator.
//
// # Repair
//
// A request with an assistant turn or a tool result after the first user
// turn is a repair; its attempt is 1 plus the number of assistant turns.
// The lines "path: message" after the last assistant turn (path a JSON
// Pointer; "/" is the whole reply) are the errors. The simulator starts
// from its previous reply (the last assistant content or tool call
// arguments, parsed strictly or out of a fence or prose), else from the
// honest record, and fixes each listed path with probability
// RepairFixRate, one draw per path in order: it sets the honest value
// there, adds it at the first missing level, removes a field the honest
// record lacks, or sets null when the value already was the honest one. A
// previous reply that did not parse is sent again unchanged unless its "/"
// error is chosen for fixing.
//
// When the last user turn (or tool result) mentions "JSON Patch", the
// reply is instead an RFC 6902 array of add / replace / remove operations
// against the previous reply that makes the same fixes (an empty array
// when none is chosen; wrapped as {"<name>": [...]} when the schema asks for
// an object with one array property of operations). Applied in order, it
// gives exactly the record the regenerate form would. A previous reply that
// did not parse cannot be patched; the whole JSON is sent instead.
//
// Repairs never carry faults.
//
// # Usage, latency and headers
//
// usage.prompt_tokens and usage.completion_tokens are an estimate, not a
// tokenizer: ceil(code points / 4) of the reply, and of the messages' text,
// tool call arguments and schema for the prompt. With
// config.Simulator.Latency set, each call waits a seeded time uniform in
// [0.5, 1.5] × that mean, and returns early when the caller goes away.
//
// Each chat reply carries X-Llmsim-Fault (the fault applied, "none"),
// X-Llmsim-Fault-Path (the JSON Pointer it hit, when one), X-Llmsim-Attempt
// and, on repairs, X-Llmsim-Fixed (the fixed paths, comma separated). They
// name no customer values. The server logs each call at debug level with
// the same facts and never logs message text.
package llmsim

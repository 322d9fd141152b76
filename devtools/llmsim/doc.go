// Package llmsim is the extractq LLM simulator: a test double standing in
// for an OpenAI-compatible chat completions server. It is not a model. It
// serves the OpenAI chat completions API well enough for the product's
// tests, its offline demo and its benchmarks, where no LLM is reachable: it
// fills the requested JSON Schema from the customer message with plain
// heuristics and injects the faults real models make, at seeded rates. It
// is a development tool, not built into the product's image.
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
//   - POST /admin/outage?seconds=N and GET /admin/stats: test endpoints,
//     see Outages and counters. They have no authentication: the
//     simulator is a test tool, never to be exposed beyond a test network.
//
// Bad requests get a 400 with an OpenAI error body,
// {"error":{"message","type":"invalid_request_error","param","code"}}; an
// unknown URL a 404 and a wrong method a 405 of the same shape.
// Server.ListenAndServe runs the handler until its context is done and
// shuts down gracefully; devtools/cmd/llmsim wraps it.
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
//   - wrong_enum: one field with an enum given a value of the right JSON
//     type that the enum does not hold, the way a model misses one: the
//     value in words with a capital ("Refund status" for refund_status),
//     else "unknown".
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
// Replies are deterministic: every random choice of a reply comes from a
// generator seeded with a hash of config.Simulator.Seed, the request's seed
// (if sent), the attempt number and the message text. The same inputs give
// the same reply; nothing uses the global generator.
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
// error is chosen for fixing. A chosen line whose message says the field
// "must be V", V one of the field's enum values or null, sets V instead of
// the honest value: the simulator follows the instruction of a rule's
// message ("/flow: flow must be account_access for intent ...") as a model
// reading the repair turn would.
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
// # Prompt errors
//
// The simulator ignores prompt wording, except through
// config.Simulator.PromptErrors: the first entry whose Match occurs in the
// request's system (or developer) turns gives a value error rate. The
// wire carries no prompt version, so an entry recognises a version by a
// phrase of its system turn. Each non-null property value of the honest
// record, at any depth, is then hit when a uniform draw, from a hash of
// the seed, the message text and the value's path, is below the rate: it
// becomes null when its schema allows null, else the next other value of
// its enum; other values are left alone. These are errors of the right
// shape, which validation cannot catch (an evaluation against labels
// does: cmd/eval). The draw does not depend on the attempt or the try, so
// every run of a message under one version gives the same errors, a
// repair does not undo them, and a higher rate hits a superset of what a
// lower one hits.
//
// # Order of a chat call
//
// Each POST /v1/chat/completions is answered by the first that applies:
//
//  1. an outage in course: 503;
//  2. a bad request: 400 (it counts against no limit and draws nothing);
//  3. a transport fault drawn for this try: 403 HTML page, 429 or 500;
//  4. the enforced limits: 429;
//  5. the latency, then the 200 reply (or nothing, when the caller went
//     away during it).
//
// Error answers are immediate: only a 200 waits the latency.
//
// # Tries
//
// The server counts, per request body (SHA-256 of the exact bytes), how
// many times it has received it: the try number, from 1. A client that
// retries sends the same body, so its retry is try 2, 3, ... The transport
// fault and the latency of a call are drawn from a generator seeded with a
// hash of config.Simulator.Seed, the body's hash and the try number. So a
// retry is a new, independent draw (at a 429 rate of 0.5 the k-th try
// fails with probability 0.5, and a retry eventually succeeds), yet a run
// is repeatable: the same seed and the same requests, in any interleaving
// of different bodies, give the same outcomes. The reply itself (faults in
// its content) does not depend on the try. The table holds up to 262,144
// bodies; when full it is emptied and tries count from 1 again. Replies
// carry the try as X-Llmsim-Try.
//
// # Transport faults
//
// Each try of a call, first calls and repairs alike, fails as a whole with
// one uniform draw against the rates, cumulative in this order (the
// earlier win when they add up to more than 1):
//
//   - rate_limited (RateLimitedRate): 429 with Retry-After (RetryAfter in
//     whole seconds, rounded up, at least 1), retry-after-ms (RetryAfter in
//     milliseconds; RetryAfter 0 means 1s) and OpenAI's body
//     {"error":{"message":"Rate limit reached ...","type":"requests",
//     "param":null,"code":"rate_limit_exceeded"}}.
//   - server_error (ServerErrorRate): 500 with OpenAI's body, type
//     "server_error", code null.
//   - forbidden_html (ForbiddenHTMLRate): 403 with an HTML page
//     (Content-Type text/html), as a proxy in front of the provider sends;
//     it carries no x-ratelimit-* headers. go-openai returns it as a
//     *openai.RequestError, the others as *openai.APIError.
//
// X-Llmsim-Fault names the fault. Transport faults charge no limit.
//
// # Enforced limits
//
// RequestsPerMinute and TokensPerMinute (0: none) are token buckets, full
// at the start (empty with LimitsStartEmpty), holding at most the limit and refilled continuously at the
// limit per minute. A call charges 1 request and its tokens: the prompt
// estimate (below) plus max_completion_tokens, else max_tokens, else 0. A
// call that does not fit both buckets charges neither and gets 429 with
// Retry-After and retry-after-ms (until both fit) and OpenAI's body, type
// "requests" or "tokens", code "rate_limit_exceeded". A call asking more
// tokens than TokensPerMinute gets 429 "Request too large" every time:
// waiting never helps.
//
// Every chat answer from the provider (200s, 429s, 500s; not 400s, 503s or
// the proxy's 403) carries, for each enforced limit, as OpenAI sends them:
// x-ratelimit-limit-requests, x-ratelimit-remaining-requests (whole
// requests left after this call) and x-ratelimit-reset-requests (until the
// bucket is full again, Go duration text rounded up to the millisecond:
// "1s", "250ms", "6m0s"), and the same three for -tokens.
//
// # Latency
//
// With LatencyMedian set, each 200 waits a time drawn from the log-normal
// distribution with that median and LatencyP99 as its 99th percentile:
// exp(mu + sigma*z) with z standard normal, mu = ln(median) and sigma =
// (ln(p99) - ln(median)) / 2.3263 (sigma 0, always the median, when
// LatencyP99 is not above it), capped at one hour. Otherwise, with Latency
// set, it waits a time uniform in [0.5, 1.5] × Latency. The draw is seeded
// per try (see Tries). The wait ends early when the caller goes away.
//
// # Outages and counters
//
// POST /admin/outage?seconds=N (N a decimal number of seconds, 0 to
// 1000000) makes every chat call fail with 503 and OpenAI's server_error
// body, without Retry-After, for N seconds from now; N=0 ends the outage.
// It answers {"outage":bool,"seconds":N}. Server.SetOutage does the same
// from Go.
//
// GET /admin/stats answers the counters since start as JSON (Stats):
// {"requests","by_status":{"200":n,...},"prompt_tokens",
// "completion_tokens","limited","faults":{"rate_limited":n,...},
// "outage_remaining_ms"}. Server.Stats returns them from Go. Only chat
// calls are counted; a caller that went away before its reply counts as
// status 499.
//
// # Profiles
//
// config.Simulator.Profile (simulator.profile) chooses the server the
// simulator behaves as: generic (the default, everything above), openai,
// vllm, ollama or llamacpp. Each reproduces its server's documented
// handling, and builds its replies from that server's wire fixtures
// (testdata/profiles/<profile>/, each naming its source and commit), so
// the keys and types of every reply are the server's own. Features
// returns what a profile does, for a conformance suite; Fixtures returns
// its fixtures.
//
//   - Token limit: openai, vllm and llamacpp read max_completion_tokens,
//     else max_tokens; ollama reads only max_tokens.
//   - Refused with the server's 400: openai a strict schema outside the
//     strict subset; vllm a tool_choice naming no tool (its message);
//     ollama a message content that is not a string or parts; llamacpp a
//     response_format type other than text, json_object, json_schema.
//     strict is ignored by all but openai, tool_choice by ollama.
//   - Schema enforcement (see Schema enforcement, profile.go): openai
//     with strict; vllm for a json_schema response_format and a named or
//     required tool_choice; ollama and llamacpp for a json_schema
//     response_format.
//   - Usage: cached tokens in usage.prompt_tokens_details under openai
//     (a repeated prefix of 1,024 tokens or more, in steps of 128) and
//     llamacpp (the prefix shared with the previous prompt); vllm sends
//     prompt_tokens_details null, ollama none.
//   - openai answers refusals and content_filter at RefusalRate and
//     ContentFilterRate (first replies with response_format only).
//   - Reasoning (config Reasoning): reasoning_content (vllm, llamacpp),
//     reasoning (ollama), a <think> block before the content (generic).
//   - llamacpp sends tool call arguments as a JSON object.
//   - Several tool calls (config SeveralToolCallsRate): in tools mode a
//     first reply may call the tool twice, with the same arguments, under
//     generic, openai (unless the request sends parallel_tool_calls
//     false) and ollama (which reads neither tool_choice nor
//     parallel_tool_calls); X-Llmsim-Fault says several_tool_calls. vLLM
//     guides a named tool_choice to one call and llama.cpp defaults
//     parallel_tool_calls to false: their profiles send one.
//   - Errors: each server's error body for 400s, the injected 500, and
//     an outage's 503 (Ollama's busy queue, llama.cpp's loading model);
//     the injected 429 is Ollama's own under ollama, else OpenAI's (vLLM
//     and llama.cpp document none: theirs comes from a gateway).
//     x-ratelimit-* headers only under generic and openai.
//
// # Usage and headers
//
// usage.prompt_tokens and usage.completion_tokens are an estimate, not a
// tokenizer: ceil(code points / 4) of the reply, and of the messages' text,
// tool call arguments and schema for the prompt.
//
// Each chat reply carries X-Llmsim-Fault (the fault applied, "none"),
// X-Llmsim-Fault-Path (the JSON Pointer it hit, when one), X-Llmsim-Attempt,
// X-Llmsim-Try and, on repairs, X-Llmsim-Fixed (the fixed paths, comma
// separated). They name no customer values. The server logs each call at
// debug level with the same facts and never logs message text.
package llmsim

// Package pipeline is the extraction engine. It turns one customer message
// into a record that validates against a JSON Schema, or into the error
// list that says why it could not. It has no NATS and no SQL: the worker
// hands it a run and writes what it returns, in one transaction.
//
// This comment states the extraction contract as the code implements it.
// docs/extraction.md in the repository is the reference for people.
//
// # Use
//
//	schema, err := pipeline.LoadSchema(schemas.FS, "customer_message", "customer_message.v1.json")
//	prompt, err := pipeline.LoadPrompt("extract.v1")
//	ex := pipeline.NewExtractor(client, pipeline.ExtractorConfig{
//		Model:               "gpt-4o-mini",
//		RequestMode:         pipeline.ModeResponseFormat,
//		MaxCompletionTokens: 1024,
//		ContextWindowTokens: 32768,
//		Budget:              pipeline.Budget{MaxTokens: 16000, MaxCostUSD: 0.05},
//		Price:               pipeline.Price{InputPerMTok: 0.15, CachedInputPerMTok: 0.075, OutputPerMTok: 0.60},
//	})
//	res, err := ex.Process(ctx, pipeline.Input{Text: text, Schema: schema, Prompt: prompt, Repair: pipeline.RepairPatch})
//
// client is a [ChatClient]: go-openai's *openai.Client, usually sending
// through a provider.Transport, which retries, paces and classifies calls
// below this contract.
//
// # Before any call
//
// A message that is empty or only white space (or zero-width and format
// characters, see [IsBlank]) fails with KindInput
// (keyword "empty"). A request whose estimated prompt tokens plus
// MaxCompletionTokens exceed ContextWindowTokens fails with KindInput
// (keyword "context_window"). Neither makes a call.
//
// # Extract
//
// [Extractor.Process] makes one chat call. The system and user turns come
// from the prompt version ([LoadPrompt], prompts/<version>.tmpl): the user
// turn wraps the message in <message> tags, and the system turn tells the
// model it is data, not instructions. The text goes in through
// [NeutralizeMessage], so that it cannot close or forge those tags;
// everything before it is the same for every message of a schema, so that
// providers' prefix caching can serve it. The schema is sent as
// [Schema.ModelSchema]: without the product's "x-" annotations, "$id" and
// "$schema"; under a provider with strict mode ([ExtractorConfig.Provider],
// [ProviderFeatures]) it is sent strict, in the subset [StrictSchema]
// converts it to, and the validator still checks what that drops. The
// provider also picks the token-limit field and the tool_choice form.
// [ExtractorConfig.RequestMode] chooses how:
//
//   - [ModeResponseFormat]: as response_format of type json_schema, named
//     by the schema id. The reply's content is the JSON.
//   - [ModeTools]: as the parameters of one tool, record_extraction,
//     forced by tool_choice. The reply must be exactly one call of that
//     tool; no call, several calls or another tool is KindTool. Arguments
//     sent as a JSON string holding the object are decoded once.
//
// A reply with finish_reason "length" is KindTruncated. A
// "content_filter" finish or a refusal is KindRefusal. [ExtractorConfig.Timeout]
// (default 60s) bounds each call.
//
// # Parse
//
// [ParseReply] tries a strict parse of the whole reply first. Only if that
// fails does it strip what models wrap around JSON: reasoning blocks
// (<think>, <thinking>, <reasoning>), code fences and prose. It then
// accepts exactly one distinct JSON object; [Reply.Stripped] names what
// was removed, and is stored with the call. It never invents or coerces
// a value:
//
//   - two different objects are KindParse "multiple_objects", never
//     first-wins;
//   - a key given twice is KindParse "duplicate_key", never merged or
//     last-wins;
//   - numbers stay json.Number, so 1e400 is kept as written;
//   - a reply over [MaxReplyBytes] (1 MiB), or nested deeper than
//     [MaxJSONDepth] (64), is KindParse.
//
// # Validate
//
// The object is validated by [Schema.Validate]: JSON Schema draft 2020-12
// with format assertions (santhosh-tekuri/jsonschema/v5), then the
// product's rules. Each failing leaf is one [extracttype.Error] whose message names no
// value of the customer's. A missing required property is reported at its
// own path ("/order_id"), not at its parent. The rules:
//
//   - property_case (KindSchema): a key that differs from a property only
//     by case is an error, never merged into the property.
//   - grounded (KindRule): every string or number value at or below a
//     property marked "x-grounded": true must occur in the message
//     ([Schema.Ground]). Both sides are compared on lower-cased letters and
//     digits only ("AB-123 45" matches "ab12345"), and the match must not
//     sit inside a longer run of letters or digits. Null is not checked.
//     Each value found gets an [extracttype.Evidence] span, in code points of the
//     stored text. Punctuation and quotes at a grounded string's ends are
//     cut first and not stored (put back when the record fails).
//   - nul (KindRule): a NUL character in a string or key, which Postgres
//     cannot store in jsonb ([CheckStrings]).
//   - surrogate (KindRule): a lone \ud800-\udfff escape in the reply
//     ([HasLoneSurrogate]), which encoding/json would silently replace;
//     reported at the field that holds it.
//   - the schema's own rules (KindRule, keyword the rule's name): the CEL
//     expressions of its "x-rules" lists ([Rule]), compiled when the
//     schema loads, which must be true of the objects they sit on.
//
// The list is sorted ([extracttype.ErrorList.Sort]), so prompts and stored lists do not
// depend on map order.
//
// # Repair once
//
// When every error of the first reply is repairable (parse, schema, rule
// or tool: [extracttype.Kind.Repairable]), Process makes one repair call. It sends the
// conversation so far, the bad reply as the assistant turn (in tools mode,
// its tool calls, each answered by a tool turn), and one turn holding at
// most [MaxRepairLines] (5) "path: message" lines in sorted order,
// followed by the strategy's instruction ([Input.Repair]):
//
//   - [RepairRegenerate]: "Return the corrected JSON only. Use null if
//     unsure." The reply is parsed and validated as the first was.
//   - [RepairPatch]: return an RFC 6902 JSON Patch of add, remove and
//     replace operations against the previous JSON. [ApplyRepairPatch]
//     applies it with evanphx/json-patch/v5 to the first reply's object.
//     Every path must be at or below a flagged error's path, never the
//     whole document; at most [MaxPatchOps] operations and [MaxPatchBytes]
//     bytes. A patch that breaks these rules or does not apply is
//     KindPatchInvalid. An empty patch changes nothing. The patched object
//     is validated as a reply is. A first reply that held no object to
//     patch is regenerated instead.
//
// The repair call has the first call's request shape and sends the schema
// of what it asks for: the record's for a regenerate repair; for a patch
// repair [PatchSchema] (an object whose "operations" array holds the
// operations) as response_format, or in tools mode a record_patch tool with
// it as parameters, forced by tool_choice. The patch reply is read as that
// object or as a bare RFC 6902 array. There is no second repair: what the
// repair's validation finds is the final error list.
//
// # No repair
//
// A truncated reply or a refusal fails the run at once with that kind: the
// model is not asked again. So does any list holding a kind that is not
// repairable.
//
// # Budget
//
// Before every call, the repair included, the budget is checked
// ([Budget]). The call's prompt is estimated at one token per four bytes
// ([EstimateTokens]) of the turns and the schema, and MaxCompletionTokens
// is added. With what earlier calls used, that must stay within
// Budget.MaxTokens; its cost at [Price] must stay within Budget.MaxCostUSD.
// Otherwise the call never starts and the run fails with KindBudget. When
// the budget refuses the repair call, the final list holds the budget
// error, then the first reply's errors. A zero field means no limit.
//
// # Calls counted
//
// Every call the provider answered is one [Call] in [Result.Calls],
// invalid replies included: attempt, purpose (extract, repair), model,
// prompt and schema versions, request mode, repair strategy, prompt,
// cached and completion tokens, cost ([Price.Cost]: cached prompt tokens
// at the cached rate), price version, latency, finish reason, the raw
// reply, what the parser stripped, its errors and the applied patch.
//
// A reply without usage (some OpenAI-compatible servers and proxies omit
// it) is never costed at 0: its prompt tokens are estimated as the budget
// estimates them, its completion tokens at one token per four bytes of the
// reply (content or tool arguments, and reasoning text), and the Call is
// marked [Call.UsageEstimated]. The Extractor warns once per model.
//
// A 2xx reply that cannot be decoded as a chat completion (provider class
// malformed) was answered, so it is paid: it is a Call too, with finish
// reason [FinishUndecodable], its HTTP status and size, the body as
// received and estimated tokens, and Process returns it in Result.Calls
// beside a retryable *TransportError. Any other call that failed in
// transport has no Call: Process returns a *TransportError, and
// Result.Calls holds the calls made before it. The provider's metrics
// count the failed call.
//
// # Outcomes
//
// Process returns a [Result] for every outcome the message decides:
//
//   - [OutcomeSucceeded]: valid at the first pass. Data holds the record
//     and Evidence its grounded spans.
//   - [OutcomeRepaired]: valid after the one repair.
//   - [OutcomeFailed]: Errors is the final error list and
//     [Result.Reason] its first kind. Data is nil.
//
// Data is only ever set from a reply that validated. LastReply is the last
// reply received, for the triage item.
//
// Process returns an error instead when the run should be retried, not
// decided: a [*TransportError] when the provider failed (a timeout, a
// connection error, 429, 5xx, an open breaker) after the transport's own
// retries, or ctx.Err() when ctx ends. [TransportError.Retryable] says
// whether a later delivery may succeed; a request the provider refused as
// bad (class bad_request) is not, and the worker fails the run with
// KindTransport.
//
// # Errors
//
// Every failure is one [extracttype.Error] of an [extracttype.ErrorList]: a [extracttype.Kind], a Path (an
// RFC 6901 JSON Pointer to the field as the reader means it; "" is the
// whole record), a Keyword (the JSON Schema keyword or the rule's name)
// and a short Message that never carries the customer's values.
// [extracttype.Error.Error] is the repair prompt's "path: message" line, with the root
// shown as "/"; [extracttype.Error.PathPattern] folds array indices to "*" for
// analytics. The same list makes the repair prompt, the triage view and
// the failure-analytics rows; before it is stored, [Schema.FieldPath]
// folds a key the schema does not name (which may be the customer's
// words) to [UnknownKey], as the worker does for triage items and
// failure events.
package pipeline

package pipeline

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"time"
	"unicode"
	"unicode/utf8"

	openai "github.com/sashabaranov/go-openai"
	"go.uber.org/zap"

	"github.com/extractq/extractq/extracttype"
	"github.com/extractq/extractq/provider"
)

// ChatClient is the part of go-openai's client the pipeline uses.
// *openai.Client satisfies it.
type ChatClient interface {
	CreateChatCompletion(ctx context.Context, req openai.ChatCompletionRequest) (openai.ChatCompletionResponse, error)
}

var _ ChatClient = (*openai.Client)(nil)

// Request modes: how the schema is asked for.
const (
	ModeResponseFormat = "response_format"
	ModeTools          = "tools"
)

// Repair strategies.
const (
	RepairRegenerate = "regenerate"
	RepairPatch      = "patch"
)

// Outcomes of a run.
const (
	OutcomeSucceeded = "succeeded" // valid at the first pass
	OutcomeRepaired  = "repaired"  // valid after the one repair
	OutcomeHeld      = "held"      // valid, held for a person by a review rule (x-review)
	OutcomeFailed    = "failed"    // to triage with the final error list
)

// Call purposes.
const (
	PurposeExtract = "extract"
	PurposeRepair  = "repair"
)

// ExtractorConfig configures an Extractor.
type ExtractorConfig struct {
	// Model is the model name sent with each call.
	Model string
	// RequestMode is ModeResponseFormat or ModeTools.
	RequestMode string
	// Provider names the server (ProviderOpenAI, ...; see
	// ProviderFeatures): it decides the token-limit field, strict mode
	// and the tool_choice form of each request. Empty or unknown means
	// ProviderGeneric.
	Provider string
	// MaxCompletionTokens caps each reply, in tokens.
	MaxCompletionTokens int
	// ContextWindowTokens is the model's context; a request whose estimate
	// with MaxCompletionTokens exceeds it is not sent (KindInput).
	ContextWindowTokens int
	// Timeout bounds one call. Zero means 60s.
	Timeout time.Duration
	// Budget bounds each message run.
	Budget Budget
	// Price and PriceVersion price every call.
	Price        Price
	PriceVersion string
	// Logger receives debug logs; nil means none. Customer text is never
	// logged.
	Logger *zap.Logger
	// FixedParts, when set, is the provider.Transport's (Transport.FixedParts)
	// that the client sends through: each request then carries a
	// placeholder where its output schema goes, and each schema (each
	// rendering and form of it) is encoded once instead of on every call.
	// Nil sends the schema itself (any client).
	FixedParts *provider.FixedParts
}

// Extractor runs the extraction contract (see the package doc and
// docs/extraction.md) on one message: extract, validate, repair once,
// validate, with budget checks before every call and every answered call
// counted.
type Extractor struct {
	client  ChatClient
	cfg     ExtractorConfig
	feats   Features
	log     *zap.Logger
	schemas sync.Map // *Schema -> *sentSchema
	// patchPlaceholder stands for the patch schema under
	// ExtractorConfig.FixedParts (nil without).
	patchPlaceholder json.RawMessage
	// noUsage holds the models whose replies were found without usage,
	// so that it is logged once per model.
	noUsage sync.Map
}

// NewExtractor returns an Extractor calling client.
func NewExtractor(client ChatClient, cfg ExtractorConfig) *Extractor {
	if cfg.Timeout == 0 {
		cfg.Timeout = 60 * time.Second
	}
	if cfg.RequestMode == "" {
		cfg.RequestMode = ModeResponseFormat
	}
	log := cfg.Logger
	if log == nil {
		log = zap.NewNop()
	}
	log = log.Named("extractor")
	feats, ok := ProviderFeatures(cfg.Provider)
	if !ok {
		if cfg.Provider != "" {
			log.Warn("unknown provider; sending what a generic server is sent", zap.String("provider", cfg.Provider),
				zap.String("known", providerList()))
		}
		cfg.Provider = ProviderGeneric
		feats = providerFeatures[ProviderGeneric]
	}
	if feats.TokenLimit == TokenLimitMaxTokens {
		// go-openai refuses to send max_tokens for model names it takes
		// for reasoning models (o1, o3, o4, gpt-5...): such a request
		// would fail before it is sent, on every delivery.
		//lint:ignore SA1019 Ollama and llama.cpp server read max_tokens only (pipeline/providers.go)
		if err := openai.NewReasoningValidator().Validate(openai.ChatCompletionRequest{Model: cfg.Model, MaxTokens: 1}); err != nil {
			log.Warn("the client library refuses max_tokens for this model name; sending max_completion_tokens",
				zap.String("provider", cfg.Provider), zap.String("model", cfg.Model))
			feats.TokenLimit = TokenLimitMaxCompletionTokens
		}
	}
	if feats.NoParallelToolCalls && refusesParallelToolCalls(cfg.Model) {
		feats.NoParallelToolCalls = false
	}
	e := &Extractor{client: client, cfg: cfg, feats: feats, log: log}
	if cfg.FixedParts != nil {
		if p, err := cfg.FixedParts.Placeholder(PatchSchema(feats.Strict)); err == nil {
			e.patchPlaceholder = p
		}
	}
	return e
}

// Input is one message run to extract.
type Input struct {
	// Text is the customer message as stored.
	Text string
	// Schema is the compiled schema to extract.
	Schema *Schema
	// Prompt is the prompt version to use.
	Prompt *Prompt
	// Repair is RepairRegenerate or RepairPatch.
	Repair string
	// Meta is what the schema's rules see of the message besides its
	// text (the message variable).
	Meta MessageMeta
}

// Call is one LLM call as recorded in the cost ledger.
type Call struct {
	Attempt        int
	Purpose        string
	Model          string
	PromptVersion  string
	SchemaVersion  string
	RequestMode    string
	RepairStrategy string
	// PromptTokens, CachedTokens (the part of PromptTokens served from the
	// provider's prompt cache) and CompletionTokens are the reply's usage,
	// or estimates when UsageEstimated.
	PromptTokens     int
	CachedTokens     int
	CompletionTokens int
	// UsageEstimated is true when the reply said nothing of its usage (no
	// usage object, or one with no prompt and no completion tokens) or
	// could not be decoded: the prompt
	// is then estimated as the budget estimates it, and the completion at
	// one token per four bytes of the reply (see EstimateTokens), with no
	// cached tokens. The call is never costed at 0 for want of usage.
	UsageEstimated bool
	CostUSD        float64
	PriceVersion   string
	Latency        time.Duration
	// FinishReason is the reply's finish_reason, or FinishUndecodable.
	FinishReason string
	// HTTPStatus and ReplyBytes are, for a reply that could not be decoded
	// (FinishUndecodable), its HTTP status and its size in bytes; 0 for
	// every other call.
	HTTPStatus int
	ReplyBytes int
	// Reply is the raw reply: the content, or the tool call arguments; for
	// a reply that could not be decoded, the body as received (its first
	// 64 KiB).
	Reply string
	// Stripped names what the parser removed around the JSON.
	Stripped string
	// Errors is what validation found in this call's reply.
	Errors extracttype.ErrorList
	// Patch is the RFC 6902 patch applied by a patch-strategy repair.
	Patch json.RawMessage
}

// FinishUndecodable is the FinishReason of a call whose 2xx reply could
// not be decoded as a chat completion (provider.ClassMalformed: not JSON,
// or a wrong shape). It was answered, so it is paid and recorded, with its
// usage estimated; Process returns a *TransportError with it.
const FinishUndecodable = "undecodable"

// Undecodable reports whether the call's reply could not be decoded.
func (c Call) Undecodable() bool { return c.FinishReason == FinishUndecodable }

// Valid reports whether the call's reply validated: it was decoded and
// validation found no error.
func (c Call) Valid() bool { return len(c.Errors) == 0 && !c.Undecodable() }

// Result is the outcome of a run.
type Result struct {
	// Outcome is OutcomeSucceeded, OutcomeRepaired, OutcomeHeld or
	// OutcomeFailed.
	Outcome string
	// Data is the validated record; nil unless the outcome is succeeded,
	// repaired or held. Nothing unvalidated is ever here. A held record is
	// not a result until a person approves it.
	Data json.RawMessage
	// Held lists the review rules that held a valid record (kind
	// extracttype.KindHeld, keyword the rule's name), for OutcomeHeld
	// only; ValidAs is then how the record validated: OutcomeSucceeded
	// (first pass) or OutcomeRepaired.
	Held    extracttype.ErrorList
	ValidAs string
	// Evidence locates every grounded value of Data in the text.
	Evidence []extracttype.Evidence
	// Errors is the final error list of a failed run; its first error's
	// kind is the failure's reason.
	Errors extracttype.ErrorList
	// Calls are every call made, in order, failed ones too.
	Calls []Call
	// LastReply is the last reply received, for the triage item.
	LastReply string
	// Patch is the applied repair patch (RFC 6902) under RepairPatch.
	Patch json.RawMessage
}

// Reason returns the kind of the first final error, or "".
func (r *Result) Reason() extracttype.Kind {
	if len(r.Errors) == 0 {
		return ""
	}
	return r.Errors[0].Kind
}

// TransportError is a provider failure that is not a reply to validate: a
// timeout, a connection error, 429, 5xx, or a request the provider
// refused. Class says which (see provider.ErrorClass); Retryable says
// whether the run should be retried later (nak) rather than failed.
// Result.Calls holds the calls made before it.
type TransportError struct {
	StatusCode int                 // HTTP status; 0 for a connection error, timeout or open breaker
	Class      provider.ErrorClass // what the provider said; see provider.Class
	Err        error
}

func (e *TransportError) Error() string {
	s := "llm transport: "
	if e.Class != provider.ClassNone {
		s += string(e.Class) + ": "
	}
	if e.StatusCode != 0 {
		s += fmt.Sprintf("HTTP %d: ", e.StatusCode)
	}
	return s + e.Err.Error()
}

func (e *TransportError) Unwrap() error { return e.Err }

// Process runs the contract on in. It returns a Result for every outcome
// the message decides: succeeded, repaired, held (valid, but a review
// rule holds it: Result.Held), or failed with its error list.
// It returns a *TransportError (with the partial Result) when the provider
// failed in a way that is not the message's fault, and ctx.Err() when ctx
// ends; the run should then be retried, not sent to triage.
func (e *Extractor) Process(ctx context.Context, in Input) (*Result, error) {
	res := &Result{}
	if errs := checkInput(in.Text); len(errs) > 0 {
		return fail(res, errs), nil
	}

	msgs := []openai.ChatCompletionMessage{
		{Role: openai.ChatMessageRoleSystem, Content: in.Prompt.System(in.Schema.Title)},
		{Role: openai.ChatMessageRoleUser, Content: in.Prompt.User(in.Text)},
	}
	est := e.estimate(msgs, e.outputSchema(in, ""))
	if e.cfg.ContextWindowTokens > 0 && est+e.cfg.MaxCompletionTokens > e.cfg.ContextWindowTokens {
		return fail(res, extracttype.ErrorList{{Kind: extracttype.KindInput, Keyword: "context_window",
			Message: fmt.Sprintf("message needs about %d prompt tokens; the model's context is %d", est, e.cfg.ContextWindowTokens)}}), nil
	}

	// Attempt 1: extract.
	if errs := e.checkBudget(res, est); len(errs) > 0 {
		return fail(res, errs), nil
	}
	call, resp, err := e.call(ctx, msgs, in, 1, PurposeExtract, "")
	if err != nil {
		return answered(res, call), err
	}
	text := &runText{text: in.Text, meta: in.Meta}
	inst, errs, stripped, ev := e.check(resp, in, text)
	call.Errors, call.Stripped = errs, stripped
	res.Calls = append(res.Calls, call)
	res.LastReply = call.Reply
	if len(errs) == 0 {
		return succeed(res, OutcomeSucceeded, inst, ev, in.Schema, text), nil
	}
	if !errs.Repairable() {
		return fail(res, errs), nil
	}

	// Attempt 2: the one repair. A reply with no object to patch is
	// regenerated whatever the strategy.
	if in.Repair == RepairPatch && inst == nil {
		in.Repair = RepairRegenerate
	}
	msgs = append(msgs, e.repairTurns(resp, errs, in)...)
	est = e.estimate(msgs, e.outputSchema(in, in.Repair))
	if berrs := e.checkBudget(res, est); len(berrs) > 0 {
		return fail(res, append(berrs, errs...)), nil
	}
	call2, resp2, err := e.call(ctx, msgs, in, 2, PurposeRepair, in.Repair)
	if err != nil {
		return answered(res, call2), err
	}
	var inst2 any
	var errs2 extracttype.ErrorList
	var ev2 []extracttype.Evidence
	if in.Repair == RepairPatch {
		inst2, errs2, res.Patch, ev2 = e.checkPatch(resp2, inst, errs, in, text)
		call2.Patch = res.Patch
	} else {
		inst2, errs2, call2.Stripped, ev2 = e.check(resp2, in, text)
	}
	call2.Errors = errs2
	res.Calls = append(res.Calls, call2)
	res.LastReply = call2.Reply
	if len(errs2) == 0 {
		return succeed(res, OutcomeRepaired, inst2, ev2, in.Schema, text), nil
	}
	return fail(res, errs2), nil
}

// answered adds c to res.Calls when the provider answered it although the
// call failed (its reply could not be decoded): it was paid.
func answered(res *Result, c Call) *Result {
	if c.Undecodable() {
		res.Calls = append(res.Calls, c)
	}
	return res
}

func fail(res *Result, errs extracttype.ErrorList) *Result {
	res.Outcome = OutcomeFailed
	res.Errors = errs
	res.Data = nil
	return res
}

// succeed records a validated instance with ev, the evidence its
// validation found; when one of schema's review rules holds it, the
// outcome is OutcomeHeld with the rules, and outcome is kept as ValidAs.
func succeed(res *Result, outcome string, inst any, ev []extracttype.Evidence, schema *Schema, text *runText) *Result {
	b, err := json.Marshal(inst)
	if err != nil {
		return fail(res, extracttype.ErrorList{{Kind: extracttype.KindParse, Message: "record cannot be encoded as JSON"}})
	}
	res.Outcome = outcome
	res.Data = b
	res.Evidence = ev
	if held := schema.review(inst, text); len(held) > 0 {
		res.Outcome, res.Held, res.ValidAs = OutcomeHeld, held, outcome
	}
	return res
}

// checkInput rejects messages no call should be spent on.
func checkInput(text string) extracttype.ErrorList {
	if IsBlank(text) {
		return extracttype.ErrorList{{Kind: extracttype.KindInput, Keyword: "empty", Message: "message text is empty"}}
	}
	return nil
}

// IsBlank reports whether s holds nothing a reader sees: only white space
// (unicode.IsSpace) and default-ignorable characters, that is format
// characters (category Cf: zero-width space, joiners, the byte-order mark,
// soft hyphen), variation selectors and the other default-ignorable code
// points of Unicode (such as U+034F and the Hangul fillers). Ingest and
// the pipeline reject such a text as empty.
func IsBlank(s string) bool {
	for _, r := range s {
		if !unicode.IsSpace(r) && !unicode.In(r, unicode.Cf, unicode.Variation_Selector, unicode.Other_Default_Ignorable_Code_Point) {
			return false
		}
	}
	return true
}

// estimate is a call's prompt estimate: its messages and the output
// schema it sends.
func (e *Extractor) estimate(msgs []openai.ChatCompletionMessage, schema json.RawMessage) int {
	n := estimateBytes(len(schema)) + 8
	for _, m := range msgs {
		n += EstimateTokens(m.Content) + 4
		for _, tc := range m.ToolCalls {
			n += EstimateTokens(tc.Function.Arguments) + 4
		}
	}
	return n
}

// checkBudget refuses a call whose estimated prompt plus its completion
// cap would break the run's budget, counting what earlier calls used.
func (e *Extractor) checkBudget(res *Result, estPrompt int) extracttype.ErrorList {
	usedTok, usedCost := 0, 0.0
	for _, c := range res.Calls {
		usedTok += c.PromptTokens + c.CompletionTokens
		usedCost += c.CostUSD
	}
	b := e.cfg.Budget
	next := estPrompt + e.cfg.MaxCompletionTokens
	if b.MaxTokens > 0 && usedTok+next > b.MaxTokens {
		return extracttype.ErrorList{{Kind: extracttype.KindBudget, Keyword: "max_tokens",
			Message: fmt.Sprintf("next call needs up to %d tokens; %d of %d used", next, usedTok, b.MaxTokens)}}
	}
	nextCost := e.cfg.Price.Cost(estPrompt, 0, e.cfg.MaxCompletionTokens)
	if b.MaxCostUSD > 0 && usedCost+nextCost > b.MaxCostUSD {
		return extracttype.ErrorList{{Kind: extracttype.KindBudget, Keyword: "max_cost_usd",
			Message: fmt.Sprintf("next call may cost $%.6f; $%.6f of $%.6f used", nextCost, usedCost, b.MaxCostUSD)}}
	}
	return nil
}

// call makes one chat call and records it. Provider failures that are not
// the message's fault come back as *TransportError; a reply that could not
// be decoded comes back so too, with its Call filled (see
// FinishUndecodable).
func (e *Extractor) call(ctx context.Context, msgs []openai.ChatCompletionMessage, in Input, attempt int, purpose, strategy string) (Call, openai.ChatCompletionResponse, error) {
	c := Call{
		Attempt: attempt, Purpose: purpose, Model: e.cfg.Model, PromptVersion: in.Prompt.Version,
		SchemaVersion: in.Schema.Version, RequestMode: e.cfg.RequestMode, RepairStrategy: strategy,
		PriceVersion: e.cfg.PriceVersion,
	}
	cctx, cancel := context.WithTimeout(ctx, e.cfg.Timeout)
	defer cancel()
	start := time.Now()
	resp, err := e.client.CreateChatCompletion(cctx, e.request(msgs, in, strategy))
	c.Latency = time.Since(start)
	if err != nil {
		if ctx.Err() != nil {
			return c, resp, ctx.Err()
		}
		te := classifyTransport(err)
		if te.Class == provider.ClassMalformed {
			e.undecodable(&c, err, msgs, in)
		}
		return c, resp, te
	}
	var reasoning string
	if len(resp.Choices) > 0 {
		ch := resp.Choices[0]
		c.FinishReason = string(ch.FinishReason)
		c.Reply = ch.Message.Content
		if len(ch.Message.ToolCalls) > 0 {
			var parts []string
			for _, tc := range ch.Message.ToolCalls {
				parts = append(parts, tc.Function.Arguments)
			}
			c.Reply = strings.Join(parts, "\n")
		}
		if c.Reply == "" && ch.Message.Refusal != "" {
			c.Reply = ch.Message.Refusal
		}
		reasoning = ch.Message.ReasoningContent
	}
	if e.usage(&c, resp.Usage, msgs, in, EstimateTokens(c.Reply)+EstimateTokens(reasoning)) {
		if _, seen := e.noUsage.LoadOrStore(c.Model, true); !seen {
			e.log.Warn("provider replies carry no token usage; tokens are estimated (one per four bytes) and the calls marked usage_estimated",
				zap.String("model", c.Model))
		}
	}
	e.log.Debug("llm call", zap.Int("attempt", attempt), zap.String("purpose", purpose),
		zap.Int("prompt_tokens", c.PromptTokens), zap.Int("cached_tokens", c.CachedTokens),
		zap.Int("completion_tokens", c.CompletionTokens), zap.Bool("usage_estimated", c.UsageEstimated),
		zap.String("finish_reason", c.FinishReason), zap.Duration("latency", c.Latency))
	return c, resp, nil
}

// usage sets c's tokens from the reply's usage u and costs the call. A
// reply without usage (no usage object, or no prompt and no completion
// tokens in it) gets estimates: the prompt as the budget estimates it, the
// completion at estCompletion; usage then reports true.
func (e *Extractor) usage(c *Call, u openai.Usage, msgs []openai.ChatCompletionMessage, in Input, estCompletion int) bool {
	if u.PromptTokens == 0 && u.CompletionTokens == 0 {
		c.PromptTokens, c.CachedTokens, c.CompletionTokens = e.estimate(msgs, e.outputSchema(in, c.RepairStrategy)), 0, estCompletion
		c.UsageEstimated = true
	} else {
		c.PromptTokens, c.CompletionTokens = u.PromptTokens, u.CompletionTokens
		if d := u.PromptTokensDetails; d != nil {
			c.CachedTokens = d.CachedTokens
		}
	}
	c.CostUSD = e.cfg.Price.Cost(c.PromptTokens, c.CachedTokens, c.CompletionTokens)
	return c.UsageEstimated
}

// undecodable records in c a 2xx reply that could not be decoded (err is
// of class malformed): its status, size and body when the
// provider.Transport kept them, and its usage if the body still holds a
// readable one, else estimates (the completion from the body's size).
func (e *Extractor) undecodable(c *Call, err error, msgs []openai.ChatCompletionMessage, in Input) {
	c.FinishReason = FinishUndecodable
	var u openai.Usage
	var pe *provider.Error
	if errors.As(err, &pe) {
		c.HTTPStatus, c.ReplyBytes, c.Reply = pe.StatusCode, pe.BodySize, string(pe.Body)
		if len(pe.Body) == pe.BodySize {
			var body struct {
				Usage openai.Usage `json:"usage"`
			}
			if json.Unmarshal(pe.Body, &body) == nil {
				u = body.Usage
			}
		}
	}
	e.usage(c, u, msgs, in, estimateBytes(c.ReplyBytes))
	e.log.Debug("llm call answered with a reply that cannot be decoded", zap.Int("attempt", c.Attempt),
		zap.String("purpose", c.Purpose), zap.Int("status", c.HTTPStatus), zap.Int("bytes", c.ReplyBytes),
		zap.Bool("usage_estimated", c.UsageEstimated), zap.Duration("latency", c.Latency))
}

// classifyTransport turns a go-openai error into a *TransportError with
// its class: a *provider.Error in the chain (the provider.Transport
// under go-openai returns one), else go-openai's *openai.APIError or
// *openai.RequestError, else a network error (provider.Class).
func classifyTransport(err error) *TransportError {
	te := &TransportError{Class: provider.Class(err), Err: err}
	var pe *provider.Error
	var apiErr *openai.APIError
	var reqErr *openai.RequestError
	switch {
	case errors.As(err, &pe):
		te.StatusCode = pe.StatusCode
	case errors.As(err, &apiErr):
		te.StatusCode = apiErr.HTTPStatusCode
	case errors.As(err, &reqErr):
		te.StatusCode = reqErr.HTTPStatusCode
	}
	return te
}

// Retryable reports whether the run may succeed later and should be
// retried (nak) rather than failed: every class but bad_request (the
// request's own fault, such as context_length_exceeded). Classes that need
// an operator (provider.ErrorClass.Alert: quota_exhausted, credentials,
// proxy_page, endpoint) are retryable: they are not the message's fault.
// Without a class, it falls back on the status: none (connection,
// timeout), 408, 429 or 5xx.
func (e *TransportError) Retryable() bool {
	if e.Class != provider.ClassNone {
		return !e.Class.MessageFault()
	}
	s := e.StatusCode
	return s == 0 || s == http.StatusRequestTimeout || s == http.StatusTooManyRequests || s >= 500
}

// check classifies a reply and validates it. It returns the instance, the
// error list (empty when valid), what the parser stripped and the
// evidence of the grounded values found.
func (e *Extractor) check(resp openai.ChatCompletionResponse, in Input, text *runText) (any, extracttype.ErrorList, string, []extracttype.Evidence) {
	content, errs := e.replyContent(resp, toolName)
	if len(errs) > 0 {
		return nil, errs, "", nil
	}
	rep, errs := ParseReply(content)
	if len(errs) > 0 {
		return nil, errs, "", nil
	}
	if HasLoneSurrogate(content) {
		return nil, surrogateErrors(rep.Object), rep.Stripped, nil
	}
	inst := any(rep.Object)
	if e.sent(in.Schema).addedNull {
		dropAddedNulls(in.Schema.doc, in.Schema.doc, inst, 0)
	}
	verrs := checkStrings(inst, "")
	serrs, ev := in.Schema.validate(inst, text)
	verrs = append(verrs, serrs...)
	verrs.Sort()
	return inst, verrs, rep.Stripped, ev
}

// replyContent returns the JSON text of a reply, or the error that stops
// it being parsed: truncated, refusal, or a tool-call fault (in tools
// mode, one call of tool is expected).
func (e *Extractor) replyContent(resp openai.ChatCompletionResponse, tool string) (string, extracttype.ErrorList) {
	if len(resp.Choices) == 0 {
		return "", extracttype.ErrorList{{Kind: extracttype.KindParse, Message: "reply has no choices"}}
	}
	ch := resp.Choices[0]
	switch ch.FinishReason {
	case openai.FinishReasonLength:
		return "", extracttype.ErrorList{{Kind: extracttype.KindTruncated, Keyword: "length",
			Message: "reply was cut off at the completion token limit"}}
	case openai.FinishReasonContentFilter:
		return "", extracttype.ErrorList{{Kind: extracttype.KindRefusal, Keyword: "content_filter", Message: "reply was withheld by the provider's content filter"}}
	}
	if ch.Message.Refusal != "" {
		return "", extracttype.ErrorList{{Kind: extracttype.KindRefusal, Keyword: "refusal", Message: "the model refused"}}
	}
	if e.cfg.RequestMode != ModeTools {
		return ch.Message.Content, nil
	}
	calls := ch.Message.ToolCalls
	switch {
	case len(calls) == 0:
		return "", extracttype.ErrorList{{Kind: extracttype.KindTool, Keyword: "no_call", Message: "no tool call; call " + tool + " exactly once"}}
	case len(calls) > 1:
		return "", extracttype.ErrorList{{Kind: extracttype.KindTool, Keyword: "several_calls",
			Message: fmt.Sprintf("%d tool calls; call %s exactly once", len(calls), tool)}}
	case calls[0].Function.Name != tool:
		return "", extracttype.ErrorList{{Kind: extracttype.KindTool, Keyword: "wrong_tool", Message: "wrong tool; call " + tool + " exactly once"}}
	}
	args := calls[0].Function.Arguments
	// Arguments given as a JSON string holding the object are decoded once.
	var inner string
	if err := json.Unmarshal([]byte(strings.TrimSpace(args)), &inner); err == nil {
		args = inner
	}
	return args, nil
}

// CheckStrings returns a KindRule error (keyword "nul") for every string
// or key at or below path in v holding a NUL character, which Postgres
// cannot store in jsonb. The worker and the triage editor both apply it.
func CheckStrings(v any, path string) extracttype.ErrorList { return checkStrings(v, path) }

// checkStrings flags strings Postgres cannot store in jsonb: NUL
// characters. (Lone surrogate escapes are already replaced by U+FFFD when
// decoding, as encoding/json does.)
func checkStrings(v any, path string) extracttype.ErrorList {
	if !hasNUL(v) {
		return nil
	}
	return nulErrors(v, path)
}

// hasNUL reports whether a string or key in v holds a NUL character.
func hasNUL(v any) bool {
	switch t := v.(type) {
	case map[string]any:
		for k, c := range t {
			if strings.IndexByte(k, 0) >= 0 || hasNUL(c) {
				return true
			}
		}
	case []any:
		for _, c := range t {
			if hasNUL(c) {
				return true
			}
		}
	case string:
		return strings.IndexByte(t, 0) >= 0
	}
	return false
}

// nulErrors is checkStrings for a value that holds a NUL.
func nulErrors(v any, path string) extracttype.ErrorList {
	var out extracttype.ErrorList
	switch t := v.(type) {
	case map[string]any:
		for k, c := range t {
			p := path + "/" + escapeToken(k)
			if strings.ContainsRune(k, 0) {
				out = append(out, extracttype.Error{Kind: extracttype.KindRule, Path: p, Keyword: "nul", Message: "key holds a NUL character"})
			}
			out = append(out, nulErrors(c, p)...)
		}
	case []any:
		for i, c := range t {
			out = append(out, nulErrors(c, path+"/"+itoa(i))...)
		}
	case string:
		if strings.ContainsRune(t, 0) {
			out = append(out, extracttype.Error{Kind: extracttype.KindRule, Path: path, Keyword: "nul", Message: "string holds a NUL character"})
		}
	}
	return out
}

// repairTurns returns the turns that carry the bad reply back with its
// errors: an assistant turn with the reply (or its tool call) and a user
// turn (or the tool call's result) with the error lines.
func (e *Extractor) repairTurns(resp openai.ChatCompletionResponse, errs extracttype.ErrorList, in Input) []openai.ChatCompletionMessage {
	text := in.Prompt.Repair(errs, in.Repair)
	var prev openai.ChatCompletionMessage
	if len(resp.Choices) > 0 {
		prev = resp.Choices[0].Message
	}
	if e.cfg.RequestMode == ModeTools && len(prev.ToolCalls) > 0 {
		asst := openai.ChatCompletionMessage{Role: openai.ChatMessageRoleAssistant, ToolCalls: prev.ToolCalls}
		out := []openai.ChatCompletionMessage{asst}
		// Every tool call gets its result, as providers require.
		for _, tc := range prev.ToolCalls {
			out = append(out, openai.ChatCompletionMessage{Role: openai.ChatMessageRoleTool, ToolCallID: tc.ID, Content: text})
		}
		return out
	}
	content := prev.Content
	if content == "" {
		content = "(empty reply)"
	}
	return []openai.ChatCompletionMessage{
		{Role: openai.ChatMessageRoleAssistant, Content: content},
		{Role: openai.ChatMessageRoleUser, Content: text},
	}
}

// HasLoneSurrogate reports whether JSON text holds a \uD800-\uDFFF escape
// that is not half of a surrogate pair. encoding/json would replace it with
// U+FFFD, silently changing the value, and Postgres refuses it in jsonb.
func HasLoneSurrogate(s string) bool {
	for i := 0; i+6 <= len(s); i++ {
		if s[i] != '\\' {
			continue
		}
		if s[i+1] == '\\' {
			i++ // an escaped backslash
			continue
		}
		hi, ok := hex4(s, i)
		if !ok {
			continue
		}
		switch {
		case hi >= 0xD800 && hi <= 0xDBFF:
			if lo, ok := hex4(s, i+6); ok && lo >= 0xDC00 && lo <= 0xDFFF {
				i += 11
				continue
			}
			return true
		case hi >= 0xDC00 && hi <= 0xDFFF:
			return true
		}
	}
	return false
}

// surrogateErrors reports a reply's lone surrogate escapes at the fields
// that hold them: the decoder turns each into U+FFFD, so every string or
// key of obj holding U+FFFD is reported (a key at its own path). When none
// does, the error is at the root.
func surrogateErrors(obj map[string]any) extracttype.ErrorList {
	var paths []string
	var walk func(v any, path string, depth int)
	walk = func(v any, path string, depth int) {
		if depth > MaxJSONDepth {
			return
		}
		switch t := v.(type) {
		case string:
			if strings.ContainsRune(t, utf8.RuneError) {
				paths = append(paths, path)
			}
		case map[string]any:
			for k, c := range t {
				p := path + "/" + escapeToken(k)
				if strings.ContainsRune(k, utf8.RuneError) {
					paths = append(paths, p)
					continue
				}
				walk(c, p, depth+1)
			}
		case []any:
			for i, c := range t {
				walk(c, path+"/"+itoa(i), depth+1)
			}
		}
	}
	walk(obj, "", 0)
	if len(paths) == 0 {
		paths = []string{""}
	}
	out := make(extracttype.ErrorList, len(paths))
	for i, p := range paths {
		out[i] = extracttype.Error{Kind: extracttype.KindRule, Path: p, Keyword: "surrogate",
			Message: "holds a lone UTF-16 surrogate escape (\\ud800-\\udfff); no text can hold one"}
	}
	out.Sort()
	return out
}

// hex4 decodes the \uXXXX escape at s[i:], if there is one.
func hex4(s string, i int) (rune, bool) {
	if i+6 > len(s) || s[i] != '\\' || s[i+1] != 'u' {
		return 0, false
	}
	var r rune
	for _, c := range s[i+2 : i+6] {
		switch {
		case c >= '0' && c <= '9':
			r = r<<4 | (c - '0')
		case c >= 'a' && c <= 'f':
			r = r<<4 | (c - 'a' + 10)
		case c >= 'A' && c <= 'F':
			r = r<<4 | (c - 'A' + 10)
		default:
			return 0, false
		}
	}
	return r, true
}

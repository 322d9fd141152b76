package llmsim

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"go.uber.org/zap"

	"github.com/extractq/extractq/config"
)

// DefaultModel is the model name GET /v1/models lists. Chat calls accept
// any model name and echo it.
const DefaultModel = "extractq-sim-1"

// maxBodyBytes bounds a request body.
const maxBodyBytes = 8 << 20

// Server is the simulator: an http.Handler serving POST
// /v1/chat/completions, GET /v1/models, GET /healthz and the test
// endpoints POST /admin/outage and GET /admin/stats. It is safe for
// concurrent use.
type Server struct {
	cfg    config.Simulator
	log    *zap.Logger
	mux    *http.ServeMux
	re     regexCache
	calls  atomic.Int64
	tries  tries
	known  knownSchemas
	limit  limiter
	outage outageState
	stats  counters

	prof    Profile
	feat    ProfileFeatures
	prompts promptMemory
	records recordSchemas
}

var _ http.Handler = (*Server)(nil)

// New returns a simulator using cfg as given. cfg.Profile chooses the
// server it behaves as ("" is generic; see Profile); an unknown profile is
// logged and answered as generic (config.Validate refuses it in a file).
// Its rates are probabilities
// in [0, 1] and are not defaulted here, so RepairFixRate 0 means a repair
// fixes nothing (config.Load fills the file's defaults, 0.75 for
// repair_fix_rate). RetryAfter 0 means 1s. RequestsPerMinute and
// TokensPerMinute of 0 enforce no limit. Addr is not used by the handler.
// A nil log logs nothing.
func New(cfg config.Simulator, log *zap.Logger) *Server {
	if log == nil {
		log = zap.NewNop()
	}
	s := &Server{cfg: cfg, log: log.Named("llmsim")}
	prof, err := ParseProfile(cfg.Profile)
	if err != nil {
		s.log.Error("unknown simulator profile: answering as generic", zap.Error(err))
		prof = ProfileGeneric
	}
	s.prof, s.feat = prof, Features(prof)
	s.limit.requests = newBucket(cfg.RequestsPerMinute, cfg.LimitsStartEmpty)
	s.limit.tokens = newBucket(cfg.TokensPerMinute, cfg.LimitsStartEmpty)
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/chat/completions", s.chatCompletions)
	mux.HandleFunc("GET /v1/models", s.models)
	mux.HandleFunc("GET /healthz", s.healthz)
	mux.HandleFunc("POST /admin/outage", s.adminOutage)
	mux.HandleFunc("GET /admin/stats", s.adminStats)
	mux.HandleFunc("/", s.notFound)
	s.mux = mux
	return s
}

// ServeHTTP implements http.Handler.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) { s.mux.ServeHTTP(w, r) }

// ListenAndServe serves on addr until ctx is done, then shuts down
// gracefully, waiting up to 10s for calls in flight. It returns nil after a
// clean shutdown and an error naming addr when it cannot listen.
func (s *Server) ListenAndServe(ctx context.Context, addr string) error {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("llmsim: listen %s: %w", addr, err)
	}
	return s.Serve(ctx, ln)
}

// Serve is ListenAndServe on an open listener, which it closes.
func (s *Server) Serve(ctx context.Context, ln net.Listener) error {
	hs := &http.Server{Handler: s, ReadHeaderTimeout: 10 * time.Second}
	errc := make(chan error, 1)
	go func() { errc <- hs.Serve(ln) }()
	s.log.Info("extractq LLM simulator listening (not a model)", zap.String("addr", ln.Addr().String()))
	select {
	case err := <-errc:
		return fmt.Errorf("llmsim: serve: %w", err)
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	if err := hs.Shutdown(sctx); err != nil {
		return fmt.Errorf("llmsim: shutdown: %w", err)
	}
	if err := <-errc; !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("llmsim: serve: %w", err)
	}
	s.log.Info("extractq LLM simulator stopped")
	return nil
}

func (s *Server) healthz(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusOK, map[string]any{"status": "ok", "simulator": true})
}

func (s *Server) models(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusOK, modelList{Object: "list", Data: []modelInfo{
		{ID: DefaultModel, Object: "model", Created: 0, OwnedBy: "extractq-llmsim"},
	}})
}

func (s *Server) notFound(w http.ResponseWriter, r *http.Request) {
	switch r.URL.Path {
	case "/v1/chat/completions", "/v1/models", "/healthz", "/admin/outage", "/admin/stats":
		writeError(w, http.StatusMethodNotAllowed, "invalid_request_error", "method_not_allowed", "",
			r.Method+" is not allowed on "+r.URL.Path)
		return
	}
	writeError(w, http.StatusNotFound, "invalid_request_error", "unknown_url", "",
		"unknown URL "+r.URL.Path+"; the simulator serves /v1/chat/completions, /v1/models and /healthz")
}

// target is what a request asks the reply to fill.
type target struct {
	schema   []byte // the JSON Schema, nil for none
	toolName string // the forced tool, "" for content replies
	strict   bool   // the schema was sent with strict: true
	forced   bool   // tool_choice names the tool or is "required"
}

// badRequest is a 400 with an OpenAI error body.
type badRequest struct{ code, param, msg string }

func (e *badRequest) Error() string { return e.msg }

// chatCompletions serves POST /v1/chat/completions and counts the call.
func (s *Server) chatCompletions(w http.ResponseWriter, r *http.Request) {
	sw := &statusWriter{ResponseWriter: w}
	var rec callRecord
	s.chat(sw, r, &rec)
	status := sw.status
	if status == 0 {
		status = StatusClientGone
	}
	s.stats.record(status, rec.fault, rec.promptTok, rec.complTok)
}

// chat answers one chat call, in this order: an outage's 503; a bad
// request's 400; an injected transport fault (403 page, 429, 500); the
// enforced limits' 429; the latency; the reply. It fills rec for the
// counters.
func (s *Server) chat(w http.ResponseWriter, r *http.Request, rec *callRecord) {
	if s.outageLeft(time.Now()) > 0 {
		rec.fault = FaultOutage
		s.writeOutage(w)
		return
	}
	refuse := func(code, param, msg string) {
		writeProfileError(w, s.prof, http.StatusBadRequest, errBadRequest, "invalid_request_error", code, param, msg)
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxBodyBytes))
	if err != nil {
		refuse("invalid_json", "", "request body could not be read: "+err.Error())
		return
	}
	var req chatRequest
	if err := s.known.decodeRequest(body, &req); err != nil {
		refuse("invalid_json", "", "request body is not valid JSON: "+err.Error())
		return
	}
	req.keepTexts()
	tg, conv, err := checkRequest(&req, s.feat)
	var br *badRequest
	if errors.As(err, &br) {
		refuse(br.code, br.param, br.msg)
		return
	}
	var sd *schemaDoc
	if tg.schema != nil {
		if sd, err = parseSchemaCached(tg.schema); err != nil {
			refuse("invalid_schema", "response_format", "the JSON schema is not valid JSON: "+err.Error())
			return
		}
	}

	digest := sha256.Sum256(body)
	try := s.tries.next(digest)
	h := w.Header()
	h.Set("X-Llmsim-Try", strconv.FormatUint(uint64(try), 10))
	h.Set("X-Llmsim-Attempt", strconv.Itoa(conv.attempt))
	tf := s.transportFault(digest, try)
	if tf != FaultNone {
		rec.fault = tf
		h.Set("X-Llmsim-Fault", string(tf))
		s.log.Debug("chat completion transport fault",
			zap.String("fault", string(tf)), zap.Uint32("try", try), zap.Int("attempt", conv.attempt))
	}
	switch tf {
	case FaultForbiddenHTML: // a proxy's page: no provider headers
		writeForbiddenHTML(w)
		return
	case FaultRateLimited:
		if s.feat.RateLimitHeaders {
			s.limit.peek(time.Now()).setHeaders(h)
		}
		s.writeRateLimited(w, req.Model)
		return
	case FaultServerError:
		if s.feat.RateLimitHeaders {
			s.limit.peek(time.Now()).setHeaders(h)
		}
		s.writeServerError(w)
		return
	}
	promptTok := promptTokens(&req, tg, sd)
	limit := s.feat.tokenLimit(&req)
	charged := promptTok + limit
	ld := s.limit.take(time.Now(), charged)
	if s.feat.RateLimitHeaders {
		ld.setHeaders(h)
	}
	if !ld.ok {
		s.log.Debug("chat completion over the enforced limit",
			zap.String("limit", ld.over), zap.Bool("too_large", ld.tooLarge), zap.Int("tokens", charged),
			zap.Duration("retry_after", ld.retryAfter))
		writeLimited(w, ld, req.Model, charged)
		return
	}

	if err := s.sleep(r.Context(), digest, try); err != nil {
		return // the caller is gone
	}
	f := &filler{d: sd, re: &s.re}
	rng := s.rand(req.Seed, conv, "reply")
	honest := f.fill(conv.text)
	enforced := s.feat.enforced(&req, tg)
	if _, isPatch := patchProperty(sd); isPatch {
		// a patch-shaped schema: the record is the one the extraction of
		// this message asked for, remembered from that call
		if rd := s.records.recall(conv.text); rd != nil {
			f = &filler{d: rd, re: &s.re}
		}
	} else if sd != nil && !conv.repair {
		s.records.remember(conv.text, sd)
	}
	sentHonest := honest
	honest = f.fill(conv.text)
	if rate := promptErrorRate(s.cfg.PromptErrors, conv.system); rate > 0 {
		// value errors tied to the prompt: the same for a message
		// whatever the attempt, so a repair does not undo them
		honest = f.valueErrors(honest, conv.text, s.cfg.Seed, rate)
		sentHonest = f.valueErrors(sentHonest, conv.text, s.cfg.Seed, rate)
	}

	content, finish := "", "stop"
	fault, faultPath, fixed, prevented := FaultNone, "", []string(nil), FaultNone
	if !conv.repair {
		var cut bool
		content, cut, fault, faultPath = f.inject(pickFault(s.cfg, rng), honest, conv.text, rng)
		if cut {
			finish = "length"
		}
		if enforced && !cut && !conforms(sd, content) {
			// the grammar prevents it: the reply is the honest record
			prevented, fault, faultPath = fault, FaultNone, ""
			content = compactJSON(honest)
		}
	} else {
		rr := f.repair(conv, honest, s.cfg.RepairFixRate, rng)
		fixed = rr.fixed
		switch {
		case rr.raw != "":
			content = rr.raw
		case conv.patch && rr.patchOK:
			content = compactJSON(wrapPatch(sd, rr.ops))
		default:
			content = compactJSON(rr.doc)
		}
		if enforced && !conforms(sd, content) {
			// constrained to the schema sent: the regenerate form of the
			// same fixes when it fits, else the honest fill of that schema
			if alt := compactJSON(rr.doc); rr.doc != nil && conforms(sd, alt) {
				content = alt
			} else {
				content = compactJSON(sentHonest)
			}
		}
	}
	var reason *string
	if s.cfg.Reasoning {
		switch {
		case s.feat.ReasoningField != "":
			r := reasoningText
			reason = &r
		case s.feat.ThinkInContent && tg.toolName == "":
			content = "<think>\n" + reasoningText + "\n</think>\n" + content
		}
	}
	var refusal *string
	if !conv.repair && tg.toolName == "" {
		switch s.pickOpenAIRefusal(req.Seed, conv) {
		case FaultRefusal:
			r := refusalText
			refusal, fault, faultPath, finish = &r, FaultRefusal, "", "stop"
		case FaultContentFilter:
			fault, faultPath, finish = FaultContentFilter, "", "content_filter"
		}
	}
	if limit > 0 && estimateTokens(content) > limit {
		content = string([]rune(content)[:limit*4])
		finish = "length"
	}
	calls := 1
	if !conv.repair && tg.toolName != "" && fault == FaultNone && finish == "stop" && s.pickSeveralCalls(&req, conv) {
		calls, fault = 2, FaultSeveralToolCalls
	}

	n := s.calls.Add(1)
	complTok := estimateTokens(content) * calls
	if reason != nil {
		complTok += estimateTokens(*reason)
	}
	switch fault {
	case FaultRefusal:
		complTok = estimateTokens(*refusal)
	case FaultContentFilter:
		complTok = 0
	}
	cached := 0
	if s.feat.CachedTokens != "" {
		common := s.prompts.seen(req.Model, promptText(&req, tg), s.feat.CachedTokens == "prefix")
		cached = cachedTokens(s.feat.CachedTokens, common, promptTok)
	}
	rec.fault, rec.promptTok, rec.complTok = fault, promptTok, complTok
	id := fmt.Sprintf("chatcmpl-sim-%s-%d", hashHex(conv.text)[:12], n)
	toolID := fmt.Sprintf("call_sim_%016x", rng.Uint64())
	if tg.toolName != "" && finish == "stop" {
		finish = "tool_calls"
	}
	h.Set("X-Llmsim-Fault", string(fault))
	if faultPath != "" {
		h.Set("X-Llmsim-Fault-Path", faultPath)
	}
	if prevented != FaultNone {
		h.Set("X-Llmsim-Prevented", string(prevented))
	}
	if conv.repair {
		h.Set("X-Llmsim-Fixed", strings.Join(fixed, ","))
	}
	s.log.Debug("chat completion",
		zap.String("profile", string(s.prof)),
		zap.Int("attempt", conv.attempt),
		zap.Uint32("try", try),
		zap.Bool("repair", conv.repair),
		zap.Bool("patch", conv.repair && conv.patch),
		zap.Bool("tools", tg.toolName != ""),
		zap.Bool("enforced", enforced),
		zap.String("fault", string(fault)),
		zap.String("fault_path", faultPath),
		zap.Int("errors_listed", len(conv.errs)),
		zap.Int("errors_fixed", len(fixed)),
		zap.String("finish_reason", finish),
		zap.Int("prompt_tokens", promptTok),
		zap.Int("completion_tokens", complTok),
		zap.Int("cached_tokens", cached),
	)
	if s.prof != ProfileGeneric {
		v := replyValues{id: id, created: time.Now().Unix(), model: req.Model, finish: finish,
			refusal: refusal, reason: reason, prompt: promptTok, complete: complTok, cached: cached}
		name := replyCase(s.prof, tg.toolName != "", reason != nil)
		switch {
		case fault == FaultRefusal:
			name = "refusal"
		case fault == FaultContentFilter:
			name = "content_filter"
		case tg.toolName != "":
			v.toolName, v.toolID, v.args, v.calls = tg.toolName, toolID, content, calls
		default:
			c := content
			v.content = &c
		}
		writeJSON(w, http.StatusOK, buildReply(s.prof, name, v))
		return
	}
	msg := replyMessage{Role: "assistant"}
	if tg.toolName != "" {
		for i := range calls {
			msg.ToolCalls = append(msg.ToolCalls, toolCall{
				ID:       callID(toolID, i),
				Type:     "function",
				Function: functionCall{Name: tg.toolName, Arguments: argString(content)},
			})
		}
	} else {
		msg.Content = &content
	}
	resp := chatResponse{
		ID:                id,
		Object:            "chat.completion",
		Created:           time.Now().Unix(),
		Model:             req.Model,
		SystemFingerprint: "extractq-llmsim",
		Choices:           []choice{{Index: 0, Message: msg, FinishReason: finish}},
		Usage:             usage{PromptTokens: promptTok, CompletionTokens: complTok, TotalTokens: promptTok + complTok},
	}
	writeJSON(w, http.StatusOK, resp)
}

// reasoningText is the reasoning a reasoning model shows (config
// Reasoning). It names no customer value.
const reasoningText = "Reading the message for the fields the schema asks for; what it does not say stays empty."

// refusalText is the openai profile's refusal, as the API worded one
// (fixture openai/refusal.json).
const refusalText = "I'm very sorry, but I can't assist with that."

// pickOpenAIRefusal draws, under the openai profile, whether a first reply
// is a refusal or cut by the content filter (RefusalRate, then
// ContentFilterRate, cumulative), from its own generator so the other
// draws of the reply do not move.
func (s *Server) pickOpenAIRefusal(seed *int64, conv conversation) Fault {
	if !s.feat.Refusal || s.cfg.RefusalRate <= 0 && s.cfg.ContentFilterRate <= 0 {
		return FaultNone
	}
	u := s.rand(seed, conv, "refusal").Float64()
	switch {
	case u < s.cfg.RefusalRate:
		return FaultRefusal
	case u < s.cfg.RefusalRate+s.cfg.ContentFilterRate:
		return FaultContentFilter
	}
	return FaultNone
}

// pickSeveralCalls draws whether a first tools-mode reply calls the tool
// twice (SeveralToolCallsRate), under a profile whose server may
// (ProfileFeatures.SeveralToolCalls) and a request that does not forbid
// it (parallel_tool_calls false, where the server reads it). It has its
// own generator, so the other draws of the reply do not move.
func (s *Server) pickSeveralCalls(req *chatRequest, conv conversation) bool {
	if !s.feat.SeveralToolCalls || s.cfg.SeveralToolCallsRate <= 0 {
		return false
	}
	if s.feat.ParallelToolCalls && req.ParallelToolCalls != nil && !*req.ParallelToolCalls {
		return false
	}
	return s.rand(req.Seed, conv, "several_tool_calls").Float64() < s.cfg.SeveralToolCallsRate
}

// callID is the id of the i-th tool call of a reply whose first is id.
func callID(id string, i int) string {
	if i == 0 {
		return id
	}
	return fmt.Sprintf("%s_%d", id, i)
}

// checkRequest validates req and reads what it asks for, as the profile
// of feat does: the requests every profile refuses (no model, no
// messages, stream, n > 1, a tool_choice naming no tool) and those its
// server refuses (see profileRefusal).
func checkRequest(req *chatRequest, feat ProfileFeatures) (target, conversation, error) {
	var tg target
	bad := func(code, param, format string, a ...any) (target, conversation, error) {
		return tg, conversation{}, &badRequest{code: code, param: param, msg: fmt.Sprintf(format, a...)}
	}
	if req.Model == "" {
		return bad("missing_model", "model", "you must provide a model parameter")
	}
	if len(req.Messages) == 0 {
		return bad("missing_messages", "messages", "messages must hold at least one message")
	}
	for i, m := range req.Messages {
		switch m.Role {
		case "system", "developer", "user", "assistant", "tool":
		default:
			return bad("invalid_role", fmt.Sprintf("messages[%d].role", i), "messages[%d].role %q is not system, user, assistant or tool", i, m.Role)
		}
	}
	if req.Stream {
		return bad("stream_unsupported", "stream", "the simulator does not stream; send stream: false")
	}
	if req.N > 1 {
		return bad("n_unsupported", "n", "the simulator returns one choice; n must be 1")
	}
	if err := profileRefusal(req, feat); err != nil {
		return tg, conversation{}, err
	}
	var err error
	if tg, err = pickTarget(req, feat); err != nil {
		return tg, conversation{}, err
	}
	if feat.Strict && tg.strict && tg.schema != nil {
		what, param := "response_format '"+req.ResponseFormat.nameOf()+"'", "response_format"
		if tg.toolName != "" {
			what, param = "function '"+tg.toolName+"'", ""
		}
		if msg := strictSchemaError(tg.schema, what); msg != "" {
			return tg, conversation{}, &badRequest{code: "", param: param, msg: msg}
		}
	}
	conv, err := readConversation(req.Messages)
	if err != nil {
		return bad("missing_user_message", "messages", "%s", err.Error())
	}
	return tg, conv, nil
}

// pickTarget chooses the tool or the response format the reply fills. A
// profile whose server ignores tool_choice (Ollama) calls the only tool.
func pickTarget(req *chatRequest, feat ProfileFeatures) (target, error) {
	bad := func(code, param, msg string) (target, error) {
		return target{}, &badRequest{code: code, param: param, msg: msg}
	}
	choice := "auto"
	named := ""
	if feat.ToolChoice && len(req.ToolChoice) > 0 && string(req.ToolChoice) != "null" {
		var sc string
		if err := json.Unmarshal(req.ToolChoice, &sc); err == nil {
			choice = sc
		} else {
			var oc struct {
				Type     string `json:"type"`
				Function struct {
					Name string `json:"name"`
				} `json:"function"`
			}
			if err := json.Unmarshal(req.ToolChoice, &oc); err != nil || oc.Function.Name == "" {
				return bad("invalid_tool_choice", "tool_choice", `tool_choice must be "none", "auto", "required" or {"type":"function","function":{"name":...}}`)
			}
			choice, named = "function", oc.Function.Name
		}
	}
	var fns []*functionDef
	for _, t := range req.Tools {
		if t.Type == "function" && t.Function != nil {
			fns = append(fns, t.Function)
		}
	}
	if len(fns) > 0 && choice != "none" {
		var fn *functionDef
		switch {
		case named != "":
			for _, f := range fns {
				if f.Name == named {
					fn = f
				}
			}
			if fn == nil {
				if feat.Profile == ProfileVLLM {
					// vLLM's check_tool_usage (fixture vllm/tool_choice_refused.json)
					return bad("", "", "The tool specified in `tool_choice` does not match any of the specified `tools`")
				}
				return bad("invalid_tool_choice", "tool_choice", "tool_choice names "+named+", which is not in tools")
			}
		case len(fns) == 1:
			fn = fns[0]
		default:
			return bad("ambiguous_tool", "tool_choice", "the simulator calls one tool: send one tool or name it in tool_choice")
		}
		tg := target{toolName: fn.Name, strict: fn.Strict, forced: named != "" || choice == "required"}
		if len(fn.Parameters) > 0 && string(fn.Parameters) != "null" {
			tg.schema = fn.Parameters
		}
		return tg, nil
	}
	if rf := req.ResponseFormat; rf != nil && rf.Type == "json_schema" {
		if rf.JSONSchema == nil || len(rf.JSONSchema.Schema) == 0 || string(rf.JSONSchema.Schema) == "null" {
			return bad("missing_schema", "response_format.json_schema.schema", "response_format json_schema needs json_schema.schema")
		}
		return target{schema: rf.JSONSchema.Schema, strict: rf.JSONSchema.Strict}, nil
	}
	return target{}, nil
}

// profileRefusal returns the 400 req gets from the profile's server for a
// request the simulator otherwise accepts, nil for none:
//
//   - ollama: a message whose content is neither a string nor an array
//     of parts, without tool calls: "invalid message content type: T"
//     (FromChatRequest, openai/openai.go; fixture
//     ollama/content_type_refused.json).
//
//   - llamacpp: a response_format type other than text, json_object or
//     json_schema (test_completion_with_response_format; fixture
//     llamacpp/response_format_refused.json).
//
//   - openai: parallel_tool_calls sent for an o1, o3 or o4 model:
//     "Unsupported parameter: 'parallel_tool_calls' is not supported
//     with this model.", code unsupported_parameter (the error body as
//     reported for o3-mini and o4-mini in langchain-ai/langchain#29704,
//     evalstate/fast-agent#279 and tensorzero/tensorzero#2805).
//
// openai's refusal of a strict schema outside the strict subset is in
// checkRequest, once the schema is known.
func profileRefusal(req *chatRequest, feat ProfileFeatures) error {
	switch feat.Profile {
	case ProfileOpenAI:
		if req.ParallelToolCalls != nil && reasoningSeries(req.Model) {
			return &badRequest{code: "unsupported_parameter", param: "parallel_tool_calls",
				msg: "Unsupported parameter: 'parallel_tool_calls' is not supported with this model."}
		}
	case ProfileOllama:
		for _, m := range req.Messages {
			t := goTypeOf(m.Content)
			if t != "string" && t != "[]interface {}" && len(m.ToolCalls) == 0 {
				return &badRequest{msg: "invalid message content type: " + t}
			}
		}
	case ProfileLlamaCpp:
		if rf := req.ResponseFormat; rf != nil {
			switch rf.Type {
			case "", "text", "json_object", "json_schema":
			default:
				return &badRequest{msg: fmt.Sprintf("response_format type must be one of \"text\", \"json_object\" or \"json_schema\", but got: %s", rf.Type)}
			}
		}
	}
	return nil
}

// reasoningSeries reports whether model names an OpenAI o-series reasoning
// model (o1, o3, o4 and their -mini and dated variants), which refuse
// parallel_tool_calls.
func reasoningSeries(model string) bool {
	for _, p := range []string{"o1", "o3", "o4"} {
		if model == p || strings.HasPrefix(model, p+"-") {
			return true
		}
	}
	return false
}

// goTypeOf names the Go type encoding/json decodes raw into as an any, as
// Ollama's error message prints it (%T); absent or null is <nil>.
func goTypeOf(raw json.RawMessage) string {
	t := strings.TrimSpace(string(raw))
	switch {
	case t == "" || t == "null":
		return "<nil>"
	case t[0] == '"':
		return "string"
	case t[0] == '[':
		return "[]interface {}"
	case t[0] == '{':
		return "map[string]interface {}"
	case t == "true" || t == "false":
		return "bool"
	}
	return "float64"
}

// rand returns the generator of one reply, seeded from a hash of the
// configured seed, the request's seed (if any), the attempt, the message
// text and a purpose, so the same inputs always give the same reply.
func (s *Server) rand(reqSeed *int64, conv conversation, purpose string) *rand.Rand {
	h := sha256.New()
	var b [8]byte
	put := func(u uint64) {
		binary.LittleEndian.PutUint64(b[:], u)
		h.Write(b[:])
	}
	put(uint64(s.cfg.Seed))
	if reqSeed != nil {
		put(1)
		put(uint64(*reqSeed))
	} else {
		put(0)
	}
	put(uint64(conv.attempt))
	h.Write([]byte(purpose))
	h.Write([]byte{0})
	h.Write([]byte(conv.text))
	sum := h.Sum(nil)
	return rand.New(rand.NewPCG(binary.LittleEndian.Uint64(sum[:8]), binary.LittleEndian.Uint64(sum[8:16])))
}

// estimateTokens is the simulator's token estimate: ceil(code points / 4).
// It is not a tokenizer.
func estimateTokens(s string) int {
	return (utf8.RuneCountInString(s) + 3) / 4
}

// promptTokens is the prompt estimate: estimateTokens of every message's
// text and tool call arguments, and the schema (parsed as sd, nil for
// none), one after the other. The code points are counted piece by
// piece, which is the count of the whole: every piece but the schema is
// decoded JSON text, valid UTF-8, and the schema comes last.
func promptTokens(req *chatRequest, tg target, sd *schemaDoc) int {
	n := 0
	for _, m := range req.Messages {
		n += utf8.RuneCountInString(m.text())
		for _, tc := range m.ToolCalls {
			n += utf8.RuneCountInString(string(tc.Function.Arguments))
		}
	}
	if sd != nil {
		n += sd.runes
	} else {
		n += utf8.RuneCount(tg.schema)
	}
	return (n + 3) / 4
}

func hashHex(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:])
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(v)
}

// writeError writes an OpenAI error body; an empty code or param is null.
func writeError(w http.ResponseWriter, status int, typ, code, param, msg string) {
	body := apiError{Error: apiErrorBody{Message: msg, Type: typ}}
	if param != "" {
		body.Error.Param = &param
	}
	if code != "" {
		body.Error.Code = &code
	}
	writeJSON(w, status, body)
}

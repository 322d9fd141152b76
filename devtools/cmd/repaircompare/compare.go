package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"sort"
	"sync"
	"text/tabwriter"
	"time"

	openai "github.com/sashabaranov/go-openai"
	"go.uber.org/zap"

	"github.com/extractq/extractq/config"
	"github.com/extractq/extractq/devtools/llmsim"
	"github.com/extractq/extractq/extracttype"
	"github.com/extractq/extractq/pipeline"
	"github.com/extractq/extractq/schemas"
)

// The schema and prompt the comparison runs.
const (
	SchemaID   = "return_request"
	SchemaFile = "return_request.v1.json"
	PromptName = "extract.v1"
)

// Note heads every report: the figures describe the simulator.
const Note = "measurement of the extractq LLM simulator (llmsim), not of a model: " +
	"its faults, repairs and token counts are heuristics at seeded rates"

// Rates are the simulator's first-reply fault rates (probabilities in
// [0, 1], drawn in this order, at most one fault per reply) and the chance
// a repair fixes each listed error.
type Rates struct {
	InvalidJSON     float64 `json:"invalid_json"`
	Fenced          float64 `json:"fenced"`
	Prose           float64 `json:"prose"`
	WrongType       float64 `json:"wrong_type"`
	MissingRequired float64 `json:"missing_required"`
	Ungrounded      float64 `json:"ungrounded"`
	Truncated       float64 `json:"truncated"`
	RepairFix       float64 `json:"repair_fix"`
}

// DefaultRates are high enough that many first replies need the repair.
var DefaultRates = Rates{InvalidJSON: 0.02, WrongType: 0.15, MissingRequired: 0.15, Ungrounded: 0.15, RepairFix: 0.75}

// Options configures one comparison run.
type Options struct {
	// File is the JSONL message file: one object a line with "id" and
	// "text", as testdata/abcd/messages.jsonl.
	File string
	// N is how many messages from the top of File to run; 0 or less
	// means all.
	N int
	// Seed is the simulator seed, the same for both strategies.
	Seed int64
	// Rates are the simulator's fault and repair rates.
	Rates Rates
	// RequestMode is pipeline.ModeResponseFormat (default) or
	// pipeline.ModeTools.
	RequestMode string
	// Profile is the simulator's profile (llmsim.Profiles; "" is
	// generic), the server it behaves as. The extractor is set for the
	// same server (llm.provider), as docs/providers.md advises: under
	// vllm, ollama, llamacpp and openai the server enforces the schema
	// each request sends, so the structural faults never reach the
	// repair and a patch repair is answered within the patch schema.
	Profile string
	// Concurrency is how many messages run at once; 0 means 8.
	Concurrency int
	// Config gives the model, token caps, budget and prices; nil means
	// config.Default(). Its simulator section is not used.
	Config *config.Config
	// Logger receives the simulator's and the pipeline's debug logs; nil
	// means none.
	Logger *zap.Logger
}

// StrategyStats are the figures of one repair strategy over the messages.
// Every message lands in exactly one of Succeeded, Repaired and Failed.
type StrategyStats struct {
	Strategy string `json:"strategy"`
	Messages int    `json:"messages"`
	// Succeeded is runs valid at the first reply.
	Succeeded int `json:"succeeded"`
	// FirstPassFailures is runs whose first reply did not validate.
	FirstPassFailures int `json:"first_pass_failures"`
	// Repairable is first-pass failures whose errors are all repairable
	// (parse, schema, rule, tool); the others (truncated, refusal) fail at
	// once.
	Repairable int `json:"repairable"`
	// Rejected is runs failed before any call (empty input, budget).
	Rejected int `json:"rejected"`
	Repaired int `json:"repaired"`
	Failed   int `json:"failed"`
	// PatchInvalid is failed runs whose reason is patch_invalid: a repair
	// patch that could not be applied.
	PatchInvalid int `json:"patch_invalid"`
	// FirstPassByKind counts first-pass failures by their first error's
	// kind.
	FirstPassByKind map[string]int `json:"first_pass_by_kind"`
	// RepairCalls is calls made for the repair.
	RepairCalls int `json:"repair_calls"`
	// RegenerateFallbacks is repair calls of the patch strategy that
	// asked for the whole JSON because the first reply held no object to
	// patch (invalid JSON).
	RegenerateFallbacks int `json:"regenerate_fallbacks"`
	// Repair token totals and means per repair call, as the simulator
	// reports usage (its estimate, not a tokenizer).
	RepairCompletionTokens     int     `json:"repair_completion_tokens"`
	RepairPromptTokens         int     `json:"repair_prompt_tokens"`
	MeanRepairCompletionTokens float64 `json:"mean_repair_completion_tokens"`
	MeanRepairPromptTokens     float64 `json:"mean_repair_prompt_tokens"`
	// MeanPatchFormCompletionTokens is the mean completion tokens of the
	// repair calls that asked for a JSON Patch (fallbacks left out); 0
	// for regenerate.
	MeanPatchFormCompletionTokens float64 `json:"mean_patch_form_completion_tokens"`
	// PromptTokens and CompletionTokens are the totals of every call.
	PromptTokens     int `json:"prompt_tokens"`
	CompletionTokens int `json:"completion_tokens"`
	// Costs in US dollars at the configured price of the model.
	RepairCostUSD float64 `json:"repair_cost_usd"`
	TotalCostUSD  float64 `json:"total_cost_usd"`
}

// Report is the outcome of one comparison run.
type Report struct {
	Note          string `json:"note"`
	Schema        string `json:"schema"`
	SchemaVersion string `json:"schema_version"`
	Prompt        string `json:"prompt"`
	Model         string `json:"model"`
	RequestMode   string `json:"request_mode"`
	// Profile is the simulator's profile and Provider the extractor's
	// llm.provider (the same server).
	Profile      string `json:"profile"`
	Provider     string `json:"provider"`
	PriceVersion string `json:"price_version"`
	Messages     int    `json:"messages"`
	Seed         int64  `json:"seed"`
	Rates        Rates  `json:"rates"`
	// Strategies holds regenerate, then patch.
	Strategies []StrategyStats `json:"strategies"`
	// PatchToRegenerateCompletion is patch's mean completion tokens per
	// repair call over regenerate's; 0 when either made no repair call.
	PatchToRegenerateCompletion float64 `json:"patch_to_regenerate_completion_ratio"`
	// DurationSeconds is the wall time of the run.
	DurationSeconds float64 `json:"duration_seconds"`
}

// message is one line of the message file.
type message struct {
	ID   string `json:"id"`
	Text string `json:"text"`
}

// readMessages reads the first n messages (all when n <= 0) of a JSONL
// file of {"id","text"} objects. Errors name the file and line.
func readMessages(path string, n int) ([]message, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 0, 64<<10), 4<<20)
	var out []message
	for line := 1; sc.Scan() && (n <= 0 || len(out) < n); line++ {
		if len(sc.Bytes()) == 0 {
			continue
		}
		var m message
		if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
			return nil, fmt.Errorf("%s:%d: %w", path, line, err)
		}
		out = append(out, m)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return out, nil
}

// Run starts the simulator in-process on 127.0.0.1 with opts' seed and
// rates, runs every message through one pipeline.Extractor per repair
// strategy (regenerate, then patch) on the return_request schema, and
// returns the figures. Both strategies see identical first replies (same
// seed, same request); Run returns an error if they do not, if a call
// fails in transport, or if ctx ends.
func Run(ctx context.Context, opts Options) (*Report, error) {
	start := time.Now()
	cfg := opts.Config
	if cfg == nil {
		cfg = config.Default()
	}
	mode := opts.RequestMode
	if mode == "" {
		mode = pipeline.ModeResponseFormat
	}
	conc := opts.Concurrency
	if conc <= 0 {
		conc = 8
	}
	log := opts.Logger
	if log == nil {
		log = zap.NewNop()
	}
	profile, err := llmsim.ParseProfile(opts.Profile)
	if err != nil {
		return nil, err
	}
	opts.Profile = string(profile)

	msgs, err := readMessages(opts.File, opts.N)
	if err != nil {
		return nil, fmt.Errorf("read messages: %w", err)
	}
	if len(msgs) == 0 {
		return nil, fmt.Errorf("%s: %w", opts.File, errNoMessages)
	}
	schema, err := pipeline.LoadSchema(schemas.FS, SchemaID, SchemaFile)
	if err != nil {
		return nil, err
	}
	prompt, err := pipeline.LoadPrompt(PromptName)
	if err != nil {
		return nil, err
	}

	baseURL, stop, err := startSimulator(ctx, opts, log)
	if err != nil {
		return nil, err
	}
	defer stop()

	oc := openai.DefaultConfig("simulator")
	oc.BaseURL = baseURL
	oc.HTTPClient = &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: conc}}
	client := openai.NewClientWithConfig(oc)
	price := cfg.Prices.Models[cfg.LLM.Model]

	rep := &Report{
		Note: Note, Schema: SchemaID, SchemaVersion: schema.Version, Prompt: prompt.Version,
		Model: cfg.LLM.Model, RequestMode: mode, Profile: opts.Profile, Provider: opts.Profile,
		PriceVersion: cfg.Prices.Version, Messages: len(msgs), Seed: opts.Seed, Rates: opts.Rates,
	}
	var results [][]*pipeline.Result
	for _, strategy := range []string{pipeline.RepairRegenerate, pipeline.RepairPatch} {
		ex := pipeline.NewExtractor(client, pipeline.ExtractorConfig{
			Model: cfg.LLM.Model, RequestMode: mode, Provider: opts.Profile, MaxCompletionTokens: cfg.LLM.MaxCompletionTokens,
			ContextWindowTokens: cfg.LLM.ContextWindowTokens, Timeout: cfg.LLM.Timeout,
			Budget: pipeline.Budget{MaxTokens: cfg.Budget.MaxTokens, MaxCostUSD: cfg.Budget.MaxCostUSD},
			Price: pipeline.Price{InputPerMTok: price.InputPerMTok, CachedInputPerMTok: price.CachedInputPerMTok,
				OutputPerMTok: price.OutputPerMTok},
			PriceVersion: cfg.Prices.Version,
			Logger:       log,
		})
		res, err := runAll(ctx, ex, schema, prompt, strategy, msgs, conc)
		if err != nil {
			return nil, fmt.Errorf("strategy %s: %w", strategy, err)
		}
		results = append(results, res)
		rep.Strategies = append(rep.Strategies, summarize(strategy, res))
	}
	if err := sameFirstReplies(msgs, results[0], results[1]); err != nil {
		return nil, err
	}
	if r, p := rep.Strategies[0].MeanRepairCompletionTokens, rep.Strategies[1].MeanRepairCompletionTokens; r > 0 && p > 0 {
		rep.PatchToRegenerateCompletion = p / r
	}
	rep.DurationSeconds = time.Since(start).Seconds()
	return rep, nil
}

// startSimulator serves llmsim on a free port of 127.0.0.1 and returns its
// /v1 base URL and a function that shuts it down and waits for it.
func startSimulator(ctx context.Context, opts Options, log *zap.Logger) (string, func(), error) {
	r := opts.Rates
	sim := llmsim.New(config.Simulator{
		Profile: opts.Profile, Seed: opts.Seed, InvalidJSONRate: r.InvalidJSON, FencedRate: r.Fenced, ProseRate: r.Prose,
		WrongTypeRate: r.WrongType, MissingRequiredRate: r.MissingRequired, UngroundedRate: r.Ungrounded,
		TruncatedRate: r.Truncated, RepairFixRate: r.RepairFix,
	}, log)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", nil, fmt.Errorf("simulator: listen: %w", err)
	}
	sctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	done := make(chan error, 1)
	go func() { done <- sim.Serve(sctx, ln) }()
	stop := func() {
		cancel()
		if err := <-done; err != nil {
			log.Warn("simulator shutdown", zap.Error(err))
		}
	}
	return "http://" + ln.Addr().String() + "/v1", stop, nil
}

// runAll processes msgs with strategy, conc at a time, and returns the
// results in message order. The first transport error or ctx's end stops
// the run.
func runAll(ctx context.Context, ex *pipeline.Extractor, schema *pipeline.Schema, prompt *pipeline.Prompt,
	strategy string, msgs []message, conc int) ([]*pipeline.Result, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	out := make([]*pipeline.Result, len(msgs))
	jobs := make(chan int)
	var (
		wg       sync.WaitGroup
		mu       sync.Mutex
		firstErr error
	)
	for w := 0; w < conc; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range jobs {
				res, err := ex.Process(ctx, pipeline.Input{Text: msgs[i].Text, Schema: schema, Prompt: prompt, Repair: strategy})
				if err != nil {
					mu.Lock()
					if firstErr == nil {
						firstErr = fmt.Errorf("message %s: %w", msgs[i].ID, err)
					}
					mu.Unlock()
					cancel()
					continue
				}
				out[i] = res
			}
		}()
	}
feed:
	for i := range msgs {
		select {
		case jobs <- i:
		case <-ctx.Done():
			break feed
		}
	}
	close(jobs)
	wg.Wait()
	if firstErr != nil {
		return nil, firstErr
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	return out, nil
}

// summarize counts one strategy's results.
func summarize(strategy string, results []*pipeline.Result) StrategyStats {
	s := StrategyStats{Strategy: strategy, Messages: len(results), FirstPassByKind: map[string]int{}}
	patchForm, patchFormTokens := 0, 0
	for _, r := range results {
		switch r.Outcome {
		case pipeline.OutcomeSucceeded:
			s.Succeeded++
		case pipeline.OutcomeRepaired:
			s.Repaired++
		case pipeline.OutcomeHeld: // valid, held for review: counted by how it validated
			if r.ValidAs == pipeline.OutcomeRepaired {
				s.Repaired++
			} else {
				s.Succeeded++
			}
		default:
			s.Failed++
			if r.Reason() == extracttype.KindPatchInvalid {
				s.PatchInvalid++
			}
		}
		if len(r.Calls) == 0 {
			s.Rejected++
		} else if first := r.Calls[0]; !first.Valid() {
			s.FirstPassFailures++
			s.FirstPassByKind[string(first.Errors[0].Kind)]++
			if first.Errors.Repairable() {
				s.Repairable++
			}
		}
		for _, c := range r.Calls {
			s.TotalCostUSD += c.CostUSD
			s.PromptTokens += c.PromptTokens
			s.CompletionTokens += c.CompletionTokens
			if c.Purpose != pipeline.PurposeRepair {
				continue
			}
			s.RepairCalls++
			s.RepairCompletionTokens += c.CompletionTokens
			s.RepairPromptTokens += c.PromptTokens
			s.RepairCostUSD += c.CostUSD
			if strategy == pipeline.RepairPatch {
				if c.RepairStrategy == pipeline.RepairPatch {
					patchForm++
					patchFormTokens += c.CompletionTokens
				} else {
					s.RegenerateFallbacks++
				}
			}
		}
	}
	if s.RepairCalls > 0 {
		s.MeanRepairCompletionTokens = float64(s.RepairCompletionTokens) / float64(s.RepairCalls)
		s.MeanRepairPromptTokens = float64(s.RepairPromptTokens) / float64(s.RepairCalls)
	}
	if patchForm > 0 {
		s.MeanPatchFormCompletionTokens = float64(patchFormTokens) / float64(patchForm)
	}
	return s
}

// sameFirstReplies checks that both strategies got the same first reply
// for every message, which the comparison relies on.
func sameFirstReplies(msgs []message, a, b []*pipeline.Result) error {
	var diff []string
	for i := range msgs {
		ra, rb := "", ""
		if len(a[i].Calls) > 0 {
			ra = a[i].Calls[0].Reply
		}
		if len(b[i].Calls) > 0 {
			rb = b[i].Calls[0].Reply
		}
		if ra != rb {
			diff = append(diff, msgs[i].ID)
		}
	}
	if len(diff) > 0 {
		sort.Strings(diff)
		return fmt.Errorf("first replies differ between strategies for %d messages (first: %s); the comparison needs identical first replies",
			len(diff), diff[0])
	}
	return nil
}

// WriteTable prints the report as a table with its header and the ratio.
func (r *Report) WriteTable(w io.Writer) error {
	ew := &errWriter{w: w}
	fmt.Fprintf(ew, "repaircompare: %s.\n", r.Note)
	fmt.Fprintf(ew, "schema %s v%s, prompt %s, model %s, %s, %d messages, seed %d\n",
		r.Schema, r.SchemaVersion, r.Prompt, r.Model, r.RequestMode, r.Messages, r.Seed)
	fmt.Fprintf(ew, "simulator profile %s, worker llm.provider %s\n", r.Profile, r.Provider)
	fmt.Fprintf(ew, "first-reply fault rates: invalid_json %g, fenced %g, prose %g, wrong_type %g, missing_required %g, ungrounded %g, truncated %g; repair fix rate %g\n\n",
		r.Rates.InvalidJSON, r.Rates.Fenced, r.Rates.Prose, r.Rates.WrongType, r.Rates.MissingRequired,
		r.Rates.Ungrounded, r.Rates.Truncated, r.Rates.RepairFix)
	tw := tabwriter.NewWriter(ew, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "strategy\tmessages\tsucceeded\tfirst-pass failures\trepaired\tfailed\tpatch_invalid\trepair calls\tcompletion tok/repair\tprompt tok/repair\ttotal cost USD\t")
	for _, s := range r.Strategies {
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%.1f\t%.1f\t%.6f\t\n", s.Strategy, s.Messages, s.Succeeded, s.FirstPassFailures,
			s.Repaired, s.Failed, s.PatchInvalid, s.RepairCalls, s.MeanRepairCompletionTokens, s.MeanRepairPromptTokens, s.TotalCostUSD)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintf(ew, "\npatch/regenerate completion tokens per repair call: %.3f\n", r.PatchToRegenerateCompletion)
	fmt.Fprintln(ew, "(the simulator's patch repair makes the same fixes as its regenerate repair, so outcomes match by construction; only tokens differ)")
	for _, s := range r.Strategies {
		if s.Strategy == pipeline.RepairPatch && s.RegenerateFallbacks > 0 {
			fmt.Fprintf(ew, "(patch includes %d repair calls that regenerated because the first reply held no JSON object; patch-form calls alone: %.1f completion tokens)\n",
				s.RegenerateFallbacks, s.MeanPatchFormCompletionTokens)
		}
	}
	return ew.err
}

// WriteJSON writes the report as indented JSON.
func (r *Report) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(r)
}

// errWriter keeps the first write error.
type errWriter struct {
	w   io.Writer
	err error
}

func (e *errWriter) Write(p []byte) (int, error) {
	if e.err != nil {
		return 0, e.err
	}
	n, err := e.w.Write(p)
	if err != nil {
		e.err = err
	}
	return n, err
}

var _ io.Writer = (*errWriter)(nil)

// errNoMessages is returned when the file holds no message to run.
var errNoMessages = errors.New("no messages to run")

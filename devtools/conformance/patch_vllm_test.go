package conformance

import (
	"bufio"
	"context"
	"encoding/json"
	"net/http/httptest"
	"os"
	"testing"

	openai "github.com/sashabaranov/go-openai"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"

	"github.com/extractq/extractq/config"
	"github.com/extractq/extractq/devtools/llmsim"
	"github.com/extractq/extractq/extracttype"
	"github.com/extractq/extractq/pipeline"
	"github.com/extractq/extractq/schemas"
)

// TestConformancePatchRepairsVLLM runs the real sample's first messages
// through the nested return_request schema, patch repair (its default),
// against the vllm profile with the worker set for vllm: a server that
// enforces the schema each request sends. Every first reply that fails
// (an id made up with the right shape, which a grammar cannot prevent) is
// repaired by a patch that succeeds, and every repair request carries the
// patch schema, never the record's; the enforced reply is that schema's
// object. Both request modes.
func TestConformancePatchRepairsVLLM(t *testing.T) {
	t.Parallel()
	texts := sampleTexts(t, "../../testdata/abcd/small.jsonl")
	schema, err := pipeline.LoadSchema(schemas.FS, SchemaReturn, "return_request.v1.json")
	if err != nil {
		t.Fatal(err)
	}
	prompt, err := pipeline.LoadPrompt("extract.v1")
	if err != nil {
		t.Fatal(err)
	}
	for _, mode := range []string{pipeline.ModeResponseFormat, pipeline.ModeTools} {
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			log := zaptest.NewLogger(t, zaptest.Level(zap.WarnLevel))
			cfg := base(llmsim.ProfileVLLM)
			// Structural faults the grammar prevents, and made-up ids it
			// cannot.
			cfg.WrongTypeRate, cfg.MissingRequiredRate, cfg.UngroundedRate = 0.2, 0.2, 0.4
			rec := &recorder{next: llmsim.New(cfg, log)}
			srv := httptest.NewServer(rec)
			t.Cleanup(srv.Close)
			oc := openai.DefaultConfig("conformance")
			oc.BaseURL = srv.URL + "/v1"
			def := config.Default()
			ext := pipeline.NewExtractor(openai.NewClientWithConfig(oc), pipeline.ExtractorConfig{
				Model: def.LLM.Model, RequestMode: mode, Provider: pipeline.ProviderVLLM,
				MaxCompletionTokens: def.LLM.MaxCompletionTokens, ContextWindowTokens: def.LLM.ContextWindowTokens,
				Budget: pipeline.Budget{MaxTokens: def.Budget.MaxTokens, MaxCostUSD: def.Budget.MaxCostUSD}, Logger: log,
			})
			repairs := 0
			for _, text := range texts {
				res, err := ext.Process(context.Background(), pipeline.Input{Text: text, Schema: schema, Prompt: prompt, Repair: pipeline.RepairPatch})
				if err != nil {
					t.Fatal(err)
				}
				switch res.Outcome {
				case pipeline.OutcomeSucceeded:
					continue
				case pipeline.OutcomeFailed:
					t.Errorf("run failed: %v (calls %d)", res.Errors, len(res.Calls))
					continue
				}
				repairs++
				if k := res.Calls[0].Errors[0].Kind; k != extracttype.KindRule {
					t.Errorf("first reply failed with %s %v: a grammar should have prevented it", k, res.Calls[0].Errors)
				}
				rep := res.Calls[1]
				if rep.RepairStrategy != pipeline.RepairPatch || len(rep.Patch) == 0 {
					t.Errorf("repair strategy %q, patch %s: want a patch applied", rep.RepairStrategy, rep.Patch)
				}
				var reply map[string]json.RawMessage
				if json.Unmarshal([]byte(rep.Reply), &reply) != nil || reply["operations"] == nil {
					t.Errorf("repair reply %q is not the patch schema's object", rep.Reply)
				}
			}
			xs := rec.exchanges()
			patchRequests := 0
			for _, x := range xs {
				req := jsonObject(x.Request)
				msgs, _ := req["messages"].([]any)
				if len(msgs) <= 2 {
					continue // an extraction
				}
				patchRequests++
				name, sent, _ := outputSchema(req)
				props, _ := sent["properties"].(map[string]any)
				want := "json_patch"
				if mode == pipeline.ModeTools {
					want = "record_patch"
				}
				if name != want || len(props) != 1 || props["operations"] == nil {
					t.Errorf("repair request sends %q %v, want the patch schema %s", name, sent, want)
				}
			}
			if repairs < 5 || patchRequests != repairs {
				t.Errorf("%d runs repaired, %d repair requests of %d messages: want at least 5, one request each", repairs, patchRequests, len(texts))
			}
			t.Logf("%s: %d of %d messages repaired by a patch, every repair request with the patch schema", mode, repairs, len(texts))
		})
	}
}

// sampleTexts reads the texts of a JSONL sample file.
func sampleTexts(t *testing.T, path string) []string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []string
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var m struct {
			Text string `json:"text"`
		}
		if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
			t.Fatal(err)
		}
		out = append(out, m.Text)
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

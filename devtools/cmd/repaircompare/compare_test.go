package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"go.uber.org/zap/zaptest"

	"github.com/extractq/extractq/pipeline"
)

var sampleFile = filepath.Join("..", "..", "..", "testdata", "abcd", "messages.jsonl")

func TestRun(t *testing.T) {
	t.Parallel()

	const n = 30
	rep, err := Run(context.Background(), Options{File: sampleFile, N: n, Seed: 1, Rates: DefaultRates, Logger: zaptest.NewLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Messages != n || len(rep.Strategies) != 2 {
		t.Fatalf("report of %d messages and %d strategies", rep.Messages, len(rep.Strategies))
	}
	reg, pat := rep.Strategies[0], rep.Strategies[1]
	if reg.Strategy != pipeline.RepairRegenerate || pat.Strategy != pipeline.RepairPatch {
		t.Fatalf("strategies %s, %s", reg.Strategy, pat.Strategy)
	}

	t.Run("CountsAddUp", func(t *testing.T) {
		t.Parallel()
		for _, s := range rep.Strategies {
			if got := s.Succeeded + s.Repaired + s.Failed; got != s.Messages || s.Messages != n {
				t.Errorf("%s: succeeded %d + repaired %d + failed %d = %d, want %d", s.Strategy, s.Succeeded, s.Repaired, s.Failed, got, n)
			}
			if got := s.Succeeded + s.FirstPassFailures + s.Rejected; got != s.Messages {
				t.Errorf("%s: succeeded %d + first-pass failures %d + rejected %d = %d, want %d",
					s.Strategy, s.Succeeded, s.FirstPassFailures, s.Rejected, got, s.Messages)
			}
			if s.RepairCalls != s.Repairable {
				t.Errorf("%s: %d repair calls for %d repairable first-pass failures", s.Strategy, s.RepairCalls, s.Repairable)
			}
			// Every repair call ends repaired or failed; the other failures
			// never reached it.
			afterRepair := s.Failed - s.Rejected - (s.FirstPassFailures - s.Repairable)
			if s.Repaired+afterRepair != s.RepairCalls {
				t.Errorf("%s: repaired %d + failed after repair %d != repair calls %d", s.Strategy, s.Repaired, afterRepair, s.RepairCalls)
			}
			if s.PatchInvalid > s.Failed {
				t.Errorf("%s: %d patch_invalid of %d failed", s.Strategy, s.PatchInvalid, s.Failed)
			}
			kinds := 0
			for _, k := range s.FirstPassByKind {
				kinds += k
			}
			if kinds != s.FirstPassFailures {
				t.Errorf("%s: first-pass failures by kind add to %d, want %d", s.Strategy, kinds, s.FirstPassFailures)
			}
		}
		if reg.RegenerateFallbacks != 0 || reg.PatchInvalid != 0 {
			t.Errorf("regenerate: %d fallbacks, %d patch_invalid", reg.RegenerateFallbacks, reg.PatchInvalid)
		}
	})

	t.Run("SameFirstPass", func(t *testing.T) {
		t.Parallel()
		if reg.FirstPassFailures != pat.FirstPassFailures || reg.Repairable != pat.Repairable || reg.Succeeded != pat.Succeeded {
			t.Errorf("first pass differs: regenerate %+v, patch %+v", reg, pat)
		}
		if reg.FirstPassFailures < 5 {
			t.Errorf("%d first-pass failures in %d messages: the rates should make many", reg.FirstPassFailures, n)
		}
	})

	t.Run("PatchIsShorter", func(t *testing.T) {
		t.Parallel()
		if reg.RepairCalls == 0 || pat.RepairCalls == 0 {
			t.Fatal("no repair calls")
		}
		if rep.PatchToRegenerateCompletion <= 0 || rep.PatchToRegenerateCompletion >= 1 {
			t.Errorf("patch/regenerate = %.3f (%.1f / %.1f), want in (0, 1)",
				rep.PatchToRegenerateCompletion, pat.MeanRepairCompletionTokens, reg.MeanRepairCompletionTokens)
		}
		if reg.TotalCostUSD <= 0 || pat.TotalCostUSD <= 0 {
			t.Errorf("costs %v, %v", reg.TotalCostUSD, pat.TotalCostUSD)
		}
	})

	t.Run("Output", func(t *testing.T) {
		t.Parallel()
		var tbl bytes.Buffer
		if err := rep.WriteTable(&tbl); err != nil {
			t.Fatal(err)
		}
		out := tbl.String()
		for _, want := range []string{"not of a model", "regenerate", "patch", "patch/regenerate", "first-pass failures"} {
			if !strings.Contains(out, want) {
				t.Errorf("table lacks %q:\n%s", want, out)
			}
		}
		var js bytes.Buffer
		if err := rep.WriteJSON(&js); err != nil {
			t.Fatal(err)
		}
		var back Report
		if err := json.Unmarshal(js.Bytes(), &back); err != nil {
			t.Fatal(err)
		}
		if back.Strategies[1].RepairCalls != pat.RepairCalls || back.PatchToRegenerateCompletion != rep.PatchToRegenerateCompletion {
			t.Errorf("JSON round trip: %+v", back)
		}
	})
}

func TestRunErrors(t *testing.T) {
	t.Parallel()

	t.Run("MissingFile", func(t *testing.T) {
		t.Parallel()
		if _, err := Run(context.Background(), Options{File: filepath.Join(t.TempDir(), "none.jsonl"), N: 1}); err == nil {
			t.Fatal("no error for a missing file")
		}
	})
	t.Run("BadLine", func(t *testing.T) {
		t.Parallel()
		p := filepath.Join(t.TempDir(), "bad.jsonl")
		if err := os.WriteFile(p, []byte("{\"id\":\"a\",\"text\":\"hi\"}\nnot json\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		_, err := Run(context.Background(), Options{File: p})
		if err == nil || !strings.Contains(err.Error(), "bad.jsonl:2") {
			t.Fatalf("got %v, want an error naming line 2", err)
		}
	})
	t.Run("Empty", func(t *testing.T) {
		t.Parallel()
		p := filepath.Join(t.TempDir(), "empty.jsonl")
		if err := os.WriteFile(p, nil, 0o600); err != nil {
			t.Fatal(err)
		}
		if _, err := Run(context.Background(), Options{File: p}); err == nil {
			t.Fatal("no error for an empty file")
		}
	})
	t.Run("Canceled", func(t *testing.T) {
		t.Parallel()
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		if _, err := Run(ctx, Options{File: sampleFile, N: 5, Rates: DefaultRates}); err == nil {
			t.Fatal("no error for a canceled context")
		}
	})
}

// TestRunProfileVLLM runs the comparison under the vllm profile, a server
// that enforces the schema each request sends: only what a grammar cannot
// prevent (made-up ids, kind rule) reaches the repair, and every patch
// repair is answered within the patch schema and succeeds as often as a
// regeneration.
func TestRunProfileVLLM(t *testing.T) {
	t.Parallel()
	rep, err := Run(context.Background(), Options{File: sampleFile, N: 30, Seed: 1, Rates: DefaultRates, Profile: "vllm",
		Logger: zaptest.NewLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Profile != "vllm" || rep.Provider != "vllm" {
		t.Fatalf("report profile %q provider %q, want vllm", rep.Profile, rep.Provider)
	}
	reg, pat := rep.Strategies[0], rep.Strategies[1]
	for _, s := range rep.Strategies {
		if s.FirstPassFailures == 0 || s.FirstPassByKind["rule"] != s.FirstPassFailures {
			t.Errorf("%s: first-pass failures %v, want only rule errors (the grammar prevents the rest)", s.Strategy, s.FirstPassByKind)
		}
	}
	if pat.PatchInvalid != 0 || pat.RegenerateFallbacks != 0 || pat.Repaired != reg.Repaired {
		t.Errorf("patch: %d patch_invalid, %d fallbacks, %d repaired (regenerate %d): want every patch applied",
			pat.PatchInvalid, pat.RegenerateFallbacks, pat.Repaired, reg.Repaired)
	}
	if _, err := Run(context.Background(), Options{File: sampleFile, N: 1, Profile: "mistral"}); err == nil || !strings.Contains(err.Error(), "mistral") {
		t.Errorf("unknown profile: error %v, want one naming it", err)
	}
}

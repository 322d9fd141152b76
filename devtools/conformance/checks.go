package conformance

import (
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/extractq/extractq/devtools/llmsim"
	"github.com/extractq/extractq/extracttype"
	"github.com/extractq/extractq/pipeline"
)

// The cases' own checks. Each runs after the suite's checks passed, on
// the finished run.

// checkPrevented checks that the server's schema enforcement, and only
// it, kept fault f out of the first reply: the simulator says which
// fault it prevented (X-Llmsim-Prevented) or applied (X-Llmsim-Fault);
// an applied fault makes the first reply invalid.
func checkPrevented(f llmsim.Fault) func(*testing.T, *Run) {
	return func(t *testing.T, r *Run) {
		checkFault(t, r, f)
		if !r.Env.Enforced() && r.Ledger[0].Valid {
			t.Errorf("first reply with fault %s booked as valid", f)
		}
	}
}

// checkFault checks that the first reply carried fault f, or that the
// server's enforcement prevented it.
func checkFault(t *testing.T, r *Run, f llmsim.Fault) {
	h := r.Exchanges[0].Header
	if r.Env.Enforced() {
		if got := h.Get("X-Llmsim-Prevented"); got != string(f) {
			t.Errorf("enforced: X-Llmsim-Prevented %q, want %s (fault %q)", got, f, h.Get("X-Llmsim-Fault"))
		}
		return
	}
	if got := h.Get("X-Llmsim-Fault"); got != string(f) {
		t.Errorf("not enforced: X-Llmsim-Fault %q, want %s", got, f)
	}
}

// checkStripped checks that valid JSON in a fence or prose was taken from
// it, what was stripped (name) being stored, unless enforcement sent it
// bare.
func checkStripped(f llmsim.Fault, name string) func(*testing.T, *Run) {
	return func(t *testing.T, r *Run) {
		checkFault(t, r, f)
		stripped := r.Ledger[0].Stripped
		if r.Env.Enforced() {
			if stripped != "" {
				t.Errorf("enforced reply had %q stripped, want the bare JSON", stripped)
			}
			return
		}
		if stripped != name || !r.Ledger[0].Valid {
			t.Errorf("reply %q stored with %q stripped, valid %v; want %s stripped, valid", r.Ledger[0].Reply, stripped, r.Ledger[0].Valid, name)
		}
	}
}

// checkFirstErrors checks that the first reply's failure events hold an
// error of kind and keyword.
func checkFirstErrors(kind extracttype.Kind, keyword string) func(*testing.T, *Run) {
	return func(t *testing.T, r *Run) {
		for _, e := range r.Failures {
			if e.Kind == kind && e.Keyword == keyword {
				return
			}
		}
		t.Errorf("failure events %v, want one of kind %s keyword %s", r.Failures, kind, keyword)
	}
}

// checkSeveralCalls checks the first request's parallel_tool_calls
// against the worker's provider features, and that a second call, where
// the server sent one, was booked as the tool error several_calls.
func checkSeveralCalls(t *testing.T, r *Run) {
	req := r.Request(t, 0)
	got, sent := req["parallel_tool_calls"]
	if r.Env.Worker.NoParallelToolCalls != sent || sent && got != false {
		t.Errorf("request parallel_tool_calls %v (sent %v); worker features say send false: %v", got, sent, r.Env.Worker.NoParallelToolCalls)
	}
	if r.Want.Outcome == Repaired {
		checkFirstErrors(extracttype.KindTool, "several_calls")(t, r)
	}
}

// checkNoParallelField checks that a request for an o-series model
// carries no parallel_tool_calls, which OpenAI refuses for it.
func checkNoParallelField(t *testing.T, r *Run) {
	if v, ok := r.Request(t, 0)["parallel_tool_calls"]; ok {
		t.Errorf("request for %s carries parallel_tool_calls %v", r.Case.Model, v)
	}
}

// checkCap checks what the server did with the completion cap: a reply
// cut at it, or, when the server ignores the field the worker sends, a
// reply longer than it (the cap was not applied; the ledger says so by
// its tokens).
func checkCap(limit int) func(*testing.T, *Run) {
	return func(t *testing.T, r *Run) {
		req := r.Request(t, 0)
		field := r.Env.Worker.TokenLimit
		if req[field] != float64(limit) {
			t.Errorf("request %s = %v, want %d", field, req[field], limit)
		}
		for _, other := range []string{pipeline.TokenLimitMaxTokens, pipeline.TokenLimitMaxCompletionTokens} {
			if other != field && req[other] != nil {
				t.Errorf("request carries %s as well as %s", other, field)
			}
		}
		got := r.Ledger[0].CompletionTokens
		if r.Env.CapHonoured() && got > limit {
			t.Errorf("cap honoured, yet %d completion tokens over a cap of %d", got, limit)
		}
		if !r.Env.CapHonoured() && got <= limit {
			t.Errorf("cap ignored, yet %d completion tokens within a cap of %d", got, limit)
		}
	}
}

// checkNoReasoningStored checks that the server sent reasoning text
// beside the content and that none of it is in the stored reply.
func checkNoReasoningStored(t *testing.T, r *Run) {
	var body struct {
		Choices []struct {
			Message map[string]any `json:"message"`
		} `json:"choices"`
	}
	if err := json.Unmarshal(r.Exchanges[0].Body, &body); err != nil || len(body.Choices) == 0 {
		t.Fatalf("reply is not a chat completion: %v", err)
	}
	reason, _ := body.Choices[0].Message[r.Env.Server.ReasoningField].(string)
	if reason == "" {
		t.Fatalf("reply has no %s: %s", r.Env.Server.ReasoningField, r.Exchanges[0].Body)
	}
	if strings.Contains(r.Ledger[0].Reply, reason) {
		t.Errorf("reasoning text stored as the reply: %q", r.Ledger[0].Reply)
	}
}

// checkThinkStripped checks that the <think> block was stripped.
func checkThinkStripped(t *testing.T, r *Run) {
	if !strings.HasPrefix(r.Ledger[0].Reply, "<think>") || r.Ledger[0].Stripped != "reasoning" {
		t.Errorf("reply %q, stripped %q: want the <think> block stripped", r.Ledger[0].Reply, r.Ledger[0].Stripped)
	}
}

// outputSchema returns the output schema a request sends and its name:
// response_format's json_schema, or the first tool's parameters.
func outputSchema(req map[string]any) (name string, schema map[string]any, strict bool) {
	if tools, _ := req["tools"].([]any); len(tools) > 0 {
		tool, _ := tools[0].(map[string]any)
		fn, _ := tool["function"].(map[string]any)
		name, _ = fn["name"].(string)
		schema, _ = fn["parameters"].(map[string]any)
		strict, _ = fn["strict"].(bool)
		return name, schema, strict
	}
	rf, _ := req["response_format"].(map[string]any)
	js, _ := rf["json_schema"].(map[string]any)
	name, _ = js["name"].(string)
	schema, _ = js["schema"].(map[string]any)
	strict, _ = js["strict"].(bool)
	return name, schema, strict
}

// checkPatchRepair checks that the repair request asked for a patch with
// a patch-shaped schema (never the record's), that the patch was
// applied, and that under enforcement the server's reply conformed to
// that schema.
func checkPatchRepair(t *testing.T, r *Run) {
	name, schema, _ := outputSchema(r.Request(t, 1))
	wantName := "json_patch"
	if r.Env.Tools() {
		wantName = "record_patch"
	}
	props, _ := schema["properties"].(map[string]any)
	if name != wantName || props["operations"] == nil || len(props) != 1 {
		t.Errorf("repair request's output schema %q %v, want %s holding operations only", name, schema, wantName)
	}
	if tc, ok := r.Request(t, 1)["tool_choice"].(map[string]any); ok {
		if fn, _ := tc["function"].(map[string]any); fn["name"] != "record_patch" {
			t.Errorf("repair request's tool_choice %v, want record_patch", tc)
		}
	}
	rep := r.Ledger[1]
	if rep.RepairStrategy != pipeline.RepairPatch || len(rep.Patch) == 0 || string(rep.Patch) == "null" {
		t.Errorf("repair row strategy %q patch %s, want a patch stored", rep.RepairStrategy, rep.Patch)
	}
	if r.Env.Enforced() {
		var reply map[string]json.RawMessage
		if json.Unmarshal([]byte(rep.Reply), &reply) != nil || reply["operations"] == nil {
			t.Errorf("enforced repair reply %q does not conform to the patch schema", rep.Reply)
		}
	}
}

// checkStrict checks what strict mode sends and that the keyword it
// drops is still checked: with a strict worker the request has strict:
// true and the schema in the strict subset (no maxLength, every property
// required, additionalProperties false on every object), the server
// accepted it, and the first reply failed on maxLength at /email, a
// keyword the server never saw. Without strict the schema is sent whole.
func checkStrict(t *testing.T, r *Run) {
	req := r.Request(t, 0)
	_, schema, strict := outputSchema(req)
	sent, _ := json.Marshal(schema)
	if strict != r.Env.Worker.Strict {
		t.Errorf("request strict %v, want %v", strict, r.Env.Worker.Strict)
	}
	if !r.Env.Worker.Strict {
		if !strings.Contains(string(sent), `"maxLength"`) {
			t.Errorf("schema sent without strict lacks maxLength: %s", sent)
		}
		return
	}
	if strings.Contains(string(sent), `"maxLength"`) || strings.Contains(string(sent), `"minLength"`) {
		t.Errorf("strict schema holds a keyword the subset lacks: %s", sent)
	}
	if err := strictSubset(schema, ""); err != nil {
		t.Errorf("schema sent is not in the strict subset: %v", err)
	}
	for _, x := range r.Exchanges {
		if x.Status != http.StatusOK {
			t.Errorf("server refused the strict schema: %d %s", x.Status, x.Body)
		}
	}
	found := false
	for _, e := range r.Failures {
		if e.Kind == extracttype.KindSchema && e.Keyword == "maxLength" && e.Path == "/email" {
			found = true
		}
	}
	if !found {
		t.Errorf("failure events %v, want maxLength at /email: the dropped keyword checked locally", r.Failures)
	}
}

// strictSubset reports the first place where schema breaks OpenAI's
// strict subset as the suite reads it: an object without
// additionalProperties false, or a property missing from required.
func strictSubset(schema map[string]any, at string) error {
	if schema["type"] == "object" || schema["properties"] != nil {
		if schema["additionalProperties"] != false {
			return fmt.Errorf("%s: additionalProperties is %v", at, schema["additionalProperties"])
		}
		props, _ := schema["properties"].(map[string]any)
		req, _ := schema["required"].([]any)
		for k := range props {
			if !slices.Contains(req, any(k)) {
				return fmt.Errorf("%s: property %s is not required", at, k)
			}
		}
	}
	for k, v := range schema {
		switch c := v.(type) {
		case map[string]any:
			if err := strictSubset(c, at+"/"+k); err != nil {
				return err
			}
		case []any:
			for i, x := range c {
				if m, ok := x.(map[string]any); ok {
					if err := strictSubset(m, fmt.Sprintf("%s/%s/%d", at, k, i)); err != nil {
						return err
					}
				}
			}
		}
	}
	return nil
}

// checkDelimiters checks that the customer's text could not close its
// block: the request holds one <message> and one </message> line, the
// forged tags neutralised, and the stored text is the text as received.
func checkDelimiters(t *testing.T, r *Run) {
	msgs, _ := r.Request(t, 0)["messages"].([]any)
	user, _ := msgs[len(msgs)-1].(map[string]any)
	content, _ := user["content"].(string)
	lines := strings.Split(content, "\n")
	open, closing := 0, 0
	for _, l := range lines {
		switch strings.TrimSpace(l) {
		case "<message>":
			open++
		case "</message>":
			closing++
		}
	}
	if open != 1 || closing != 1 || !strings.Contains(content, "[message tag removed]") {
		t.Errorf("user turn %q: want one <message> block, the forged tags neutralised", content)
	}
	if r.StoredText != r.Text {
		t.Errorf("stored text %q, want the text as received", r.StoredText)
	}
}

// checkRetryAfter checks that the retry waited at least the Retry-After
// the 429 asked for, when it asked (Ollama's 429 carries none: the retry
// then waits the transport's backoff).
func checkRetryAfter(t *testing.T, r *Run) {
	first := r.Exchanges[0]
	if first.Status != http.StatusTooManyRequests {
		t.Fatalf("first answer %d, want 429", first.Status)
	}
	if r.Env.Server.Profile == llmsim.ProfileOllama {
		if first.Header.Get("Retry-After") != "" {
			t.Errorf("Ollama's 429 carries Retry-After %q; its fixture has none", first.Header.Get("Retry-After"))
		}
		return
	}
	if first.Header.Get("Retry-After") == "" {
		t.Fatalf("429 without Retry-After: %v", first.Header)
	}
	if gap := r.Exchanges[1].At.Sub(first.At); gap < retryAfter {
		t.Errorf("retried after %v, before the %v Retry-After asked", gap, retryAfter)
	}
}

// checkRefused checks that the 400 was the server's own error body and
// that the provider layer did not retry it.
func checkRefused(t *testing.T, r *Run) {
	x := r.Exchanges[0]
	if x.Status != http.StatusBadRequest {
		t.Fatalf("answer %d %s, want the server's 400", x.Status, x.Body)
	}
	var body struct {
		Error map[string]any `json:"error"`
	}
	if err := json.Unmarshal(x.Body, &body); err != nil || body.Error["message"] == nil {
		t.Fatalf("400 body %s is not an error object", x.Body)
	}
	_, intCode := body.Error["code"].(float64)
	if intCode != r.Env.Server.ErrorCodeInteger {
		t.Errorf("error code %v: integer %v, want %v (profile %s)", body.Error["code"], intCode, r.Env.Server.ErrorCodeInteger, r.Env.Server.Profile)
	}
	for _, f := range r.Failures {
		if f.Kind == extracttype.KindTransport && f.Keyword == "400" {
			return
		}
	}
	t.Errorf("failure events %v, want transport 400", r.Failures)
}

// checkCached checks the cached prompt tokens the ledger keeps: under a
// server that reports them, the repair, whose prompt starts with the
// whole extraction prompt, has some and is priced below the same prompt
// uncached; elsewhere none.
func checkCached(t *testing.T, r *Run) {
	ext, rep := r.Ledger[0], r.Ledger[1]
	if ext.CachedTokens != 0 {
		t.Errorf("extraction booked %d cached tokens: nothing was cached yet", ext.CachedTokens)
	}
	if r.Env.Server.CachedTokens == "" {
		if rep.CachedTokens != 0 {
			t.Errorf("profile %s reports no cached tokens, yet the repair booked %d", r.Env.Server.Profile, rep.CachedTokens)
		}
		return
	}
	if rep.CachedTokens <= 0 {
		t.Errorf("profile %s reports cached tokens (%s), yet the repair, sharing the extraction's prompt, booked none of %d",
			r.Env.Server.Profile, r.Env.Server.CachedTokens, rep.PromptTokens)
	}
}

// checkUndecodable checks what the ledger keeps of a reply that could
// not be decoded: its status and size.
func checkUndecodable(t *testing.T, r *Run) {
	l, sent := r.Ledger[0], r.Exchanges[0].Body
	if l.HTTPStatus != http.StatusOK || l.ReplyBytes != len(sent) || json.Valid(sent) {
		t.Errorf("undecodable row: status %d, %d bytes; want 200 and the %d bytes of the cut reply", l.HTTPStatus, l.ReplyBytes, len(sent))
	}
}

// checkRedelivered checks that the first delivery was nak'ed after the
// repair's retries, booking its answered extract on its own, and that the
// redelivery decided the run.
func checkRedelivered(t *testing.T, r *Run) {
	if len(r.Decisions) != 2 || !(strings.HasPrefix(r.Decisions[0], "nak") || strings.HasPrefix(r.Decisions[0], "requeue")) || r.Decisions[1] != "ack" {
		t.Errorf("decisions %v, want a nak or requeue, then an ack", r.Decisions)
	}
}

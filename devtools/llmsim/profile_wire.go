package llmsim

import (
	"embed"
	"encoding/json"
	"fmt"
	"net/http"
	"path"
	"strings"
	"sync"
)

// The profiles' replies are built from their fixtures: each reply of a
// profile other than generic is a copy of one fixture's body with the
// simulator's values put in place (ids, content, tool call, usage,
// finish_reason), so its keys and their types are the server's own. The
// generic profile keeps the simulator's own encoding (wire.go), byte for
// byte.

//go:embed testdata/profiles
var profileFiles embed.FS

// Fixture is one wire fixture: a server's reply (and the request it
// answers, when the source has one) with its source.
type Fixture struct {
	// Source names where the fixture comes from: "repo", "path",
	// "commit" (or "url" and "date"), "where" and a "note" on what is
	// copied and what is ours.
	Source map[string]string `json:"source"`
	// Request is the request body, nil when the source gives none.
	Request json.RawMessage `json:"request,omitempty"`
	Reply   struct {
		Status  int               `json:"status"`
		Headers map[string]string `json:"headers,omitempty"`
		Body    json.RawMessage   `json:"body"`
	} `json:"reply"`
}

var (
	fixturesOnce sync.Once
	fixtures     map[Profile]map[string]*Fixture
	fixturesErr  error
)

// Fixtures returns profile p's fixtures by case name (the file name less
// .json). They are embedded in the simulator; the map and the fixtures
// must not be changed.
func Fixtures(p Profile) (map[string]*Fixture, error) {
	fixturesOnce.Do(func() {
		fixtures = map[Profile]map[string]*Fixture{}
		fixturesErr = loadFixtures()
	})
	if fixturesErr != nil {
		return nil, fixturesErr
	}
	return fixtures[p], nil
}

func loadFixtures() error {
	for _, p := range Profiles {
		dir := path.Join("testdata/profiles", string(p))
		entries, err := profileFiles.ReadDir(dir)
		if err != nil {
			if p == ProfileGeneric {
				continue // generic has no fixtures: it is the simulator's own shape
			}
			return fmt.Errorf("llmsim: fixtures of %s: %w", p, err)
		}
		fixtures[p] = map[string]*Fixture{}
		for _, e := range entries {
			if !strings.HasSuffix(e.Name(), ".json") {
				continue
			}
			b, err := profileFiles.ReadFile(path.Join(dir, e.Name()))
			if err != nil {
				return fmt.Errorf("llmsim: fixture %s/%s: %w", p, e.Name(), err)
			}
			var f Fixture
			if err := json.Unmarshal(b, &f); err != nil {
				return fmt.Errorf("llmsim: fixture %s/%s: %w", p, e.Name(), err)
			}
			if len(f.Source) == 0 || f.Reply.Status == 0 || len(f.Reply.Body) == 0 {
				return fmt.Errorf("llmsim: fixture %s/%s: source, reply.status and reply.body are required", p, e.Name())
			}
			fixtures[p][strings.TrimSuffix(e.Name(), ".json")] = &f
		}
	}
	return nil
}

// template returns a fresh copy of the body of profile p's fixture name,
// decoded. A missing fixture is a programming error: the profiles' tests
// load every one.
func template(p Profile, name string) map[string]any {
	fs, err := Fixtures(p)
	if err != nil {
		panic(err)
	}
	f := fs[name]
	if f == nil {
		panic(fmt.Sprintf("llmsim: profile %s has no fixture %s", p, name))
	}
	var m map[string]any
	if err := json.Unmarshal(f.Reply.Body, &m); err != nil {
		panic(fmt.Sprintf("llmsim: fixture %s/%s: body is not an object: %v", p, name, err))
	}
	return m
}

// replyValues are the simulator's values of one 200 reply.
type replyValues struct {
	id       string
	created  int64
	model    string
	content  *string // nil: null
	finish   string
	toolName string
	toolID   string
	args     string // tool call arguments, JSON text
	calls    int    // how many calls of the tool, each with args; 0 is 1
	refusal  *string
	reason   *string // reasoning text, nil for none
	prompt   int
	complete int
	cached   int
}

// replyCase names the fixture a reply is built from.
func replyCase(p Profile, tool, reasoning bool) string {
	switch {
	case tool:
		return "tool_call"
	case reasoning && p != ProfileOpenAI:
		return "reasoning"
	}
	return "content"
}

// buildReply fills the body of fixture name of profile p with v.
func buildReply(p Profile, name string, v replyValues) map[string]any {
	body := template(p, name)
	body["id"] = v.id
	body["created"] = v.created
	body["model"] = v.model
	choices, _ := body["choices"].([]any)
	if len(choices) > 0 {
		ch, _ := choices[0].(map[string]any)
		ch["index"] = 0
		ch["finish_reason"] = v.finish
		msg, _ := ch["message"].(map[string]any)
		if msg != nil {
			if v.toolName != "" {
				fillToolCall(p, msg, v)
			}
			if _, ok := msg["content"]; ok && v.toolName == "" {
				// beside a tool call the content stays as the fixture has
				// it: null (OpenAI, llama.cpp) or "" (vLLM, Ollama)
				if v.content == nil {
					msg["content"] = nil
				} else {
					msg["content"] = *v.content
				}
			}
			if _, ok := msg["refusal"]; ok {
				if v.refusal != nil {
					msg["refusal"] = *v.refusal
				} else {
					msg["refusal"] = nil
				}
			}
			for _, field := range []string{"reasoning_content", "reasoning"} {
				if _, ok := msg[field]; !ok {
					continue
				}
				if v.reason != nil {
					msg[field] = *v.reason
				} else {
					msg[field] = nil
				}
			}
		}
		choices = choices[:1]
		body["choices"] = choices
	}
	if u, ok := body["usage"].(map[string]any); ok {
		u["prompt_tokens"] = v.prompt
		u["completion_tokens"] = v.complete
		u["total_tokens"] = v.prompt + v.complete
		if d, ok := u["prompt_tokens_details"].(map[string]any); ok {
			zero(d)
			d["cached_tokens"] = v.cached
		}
		if d, ok := u["completion_tokens_details"].(map[string]any); ok {
			zero(d)
		}
	}
	if t, ok := body["timings"].(map[string]any); ok {
		t["cache_n"] = v.cached
		t["prompt_n"] = v.prompt - v.cached
		t["predicted_n"] = v.complete
	}
	return body
}

// fillToolCall sets the fixture's first tool call to v's, keeping the
// fixture's other members (Ollama's index).
func fillToolCall(p Profile, msg map[string]any, v replyValues) {
	calls, _ := msg["tool_calls"].([]any)
	if len(calls) == 0 {
		return
	}
	tc, _ := calls[0].(map[string]any)
	if tc == nil {
		return
	}
	tc["id"] = v.toolID
	if _, ok := tc["index"]; ok {
		tc["index"] = 0
	}
	fn, _ := tc["function"].(map[string]any)
	if fn == nil {
		fn = map[string]any{}
		tc["function"] = fn
	}
	fn["name"] = v.toolName
	fn["arguments"] = v.args
	if Features(p).ToolArgsAsObject {
		var obj any
		if err := json.Unmarshal([]byte(v.args), &obj); err == nil {
			fn["arguments"] = obj
		}
		// arguments that are not JSON (a truncated reply) stay a string:
		// there is no object to send
	}
	out := []any{tc}
	for i := 1; i < v.calls; i++ {
		dup := deepCopy(tc).(map[string]any)
		dup["id"] = callID(v.toolID, i)
		if _, ok := dup["index"]; ok {
			dup["index"] = i
		}
		out = append(out, dup)
	}
	msg["tool_calls"] = out
}

// zero sets every number in m to 0.
func zero(m map[string]any) {
	for k, x := range m {
		if _, ok := x.(float64); ok {
			m[k] = 0
		}
	}
}

// errorKind is what went wrong, for a profile's error body.
type errorKind int

const (
	errBadRequest errorKind = iota
	errRateLimited
	errServer
	errUnavailable
	errNotFound
)

// writeProfileError writes an error in profile p's shape: OpenAI's
// {"error":{"message","type","param","code"}} for generic and openai
// (typ and code as given); vLLM's with type the error class and code the
// status; Ollama's with type by status and code null; llama.cpp's
// {"error":{"code","message","type"}}.
func writeProfileError(w http.ResponseWriter, p Profile, status int, kind errorKind, typ, code, param, msg string) {
	switch p {
	case ProfileVLLM:
		vt := map[errorKind]string{errBadRequest: "BadRequestError", errNotFound: "NotFoundError",
			errServer: "InternalServerError", errUnavailable: "InternalServerError", errRateLimited: "BadRequestError"}[kind]
		var pm any
		if param != "" {
			pm = param
		}
		writeJSON(w, status, map[string]any{"error": map[string]any{"message": msg, "type": vt, "param": pm, "code": status}})
	case ProfileOllama:
		ot := "api_error"
		switch status {
		case http.StatusBadRequest:
			ot = "invalid_request_error"
		case http.StatusNotFound:
			ot = "not_found_error"
		}
		writeJSON(w, status, map[string]any{"error": map[string]any{"message": msg, "type": ot, "param": nil, "code": nil}})
	case ProfileLlamaCpp:
		lt := map[errorKind]string{errBadRequest: "invalid_request_error", errNotFound: "not_found_error",
			errServer: "server_error", errUnavailable: "unavailable_error", errRateLimited: "unavailable_error"}[kind]
		writeJSON(w, status, map[string]any{"error": map[string]any{"code": status, "message": msg, "type": lt}})
	default:
		writeError(w, status, typ, code, param, msg)
	}
}

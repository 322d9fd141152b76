package pipeline

import (
	"encoding/json"
	"fmt"
	"strings"

	jsonpatch "github.com/evanphx/json-patch/v5"
	openai "github.com/sashabaranov/go-openai"

	"github.com/extractq/extractq/extracttype"
)

// Limits on a repair patch (RFC 6902).
const (
	// MaxPatchOps is the most operations a repair patch may hold.
	MaxPatchOps = 32
	// MaxPatchBytes is the largest repair patch accepted, in bytes.
	MaxPatchBytes = 64 << 10
	// patchCopyLimit bounds the bytes json-patch may copy while applying.
	patchCopyLimit = 1 << 20
)

type patchOp struct {
	Op    string
	Path  *string
	Value json.RawMessage // nil when absent; "null" for a JSON null
}

func (o *patchOp) UnmarshalJSON(b []byte) error {
	var m map[string]json.RawMessage
	if err := json.Unmarshal(b, &m); err != nil {
		return err
	}
	if raw, ok := m["op"]; ok {
		if err := json.Unmarshal(raw, &o.Op); err != nil {
			return err
		}
	}
	if raw, ok := m["path"]; ok {
		var p string
		if err := json.Unmarshal(raw, &p); err != nil {
			return err
		}
		o.Path = &p
	}
	o.Value = m["value"]
	return nil
}

// ApplyRepairPatch applies an RFC 6902 repair patch to doc. Only add,
// remove and replace are allowed; every path must be a JSON Pointer at or
// below one of the flagged paths (a missing property's path is its own),
// never the whole document. Negative array indices are off and copies are
// bounded. Every failure is one KindPatchInvalid error, whose message
// names no op or path of the patch: failure_events and triage items store
// it, and a key the model wrote may be the customer's words.
func ApplyRepairPatch(doc any, patch []byte, flagged extracttype.ErrorList) (any, extracttype.ErrorList) {
	bad := func(format string, a ...any) (any, extracttype.ErrorList) {
		return nil, extracttype.ErrorList{{Kind: extracttype.KindPatchInvalid, Keyword: "patch", Message: fmt.Sprintf(format, a...)}}
	}
	if len(patch) > MaxPatchBytes {
		return bad("patch is longer than %d bytes", MaxPatchBytes)
	}
	if doc == nil {
		return bad("there is no previous JSON object to patch")
	}
	var ops []patchOp
	if err := json.Unmarshal(patch, &ops); err != nil {
		return bad("patch is not a JSON array of operations")
	}
	if len(ops) == 0 {
		// Nothing fixed: the document is validated as it was.
		return doc, nil
	}
	if len(ops) > MaxPatchOps {
		return bad("patch has %d operations; at most %d", len(ops), MaxPatchOps)
	}
	for i, op := range ops {
		switch op.Op {
		case "add", "remove", "replace":
		default:
			return bad("operation %d: op is not add, remove or replace", i)
		}
		if op.Path == nil {
			return bad("operation %d: no path", i)
		}
		p := *op.Path
		if p == "" {
			return bad("operation %d: replaces the whole document", i)
		}
		if !validPointer(p) {
			return bad("operation %d: path is not a JSON Pointer", i)
		}
		if (op.Op == "add" || op.Op == "replace") && op.Value == nil {
			return bad("operation %d: %s without value", i, op.Op)
		}
		if !underFlagged(p, flagged) {
			return bad("operation %d: path is not at or below a flagged error", i)
		}
	}
	docJSON, err := json.Marshal(doc)
	if err != nil {
		return bad("previous JSON cannot be encoded")
	}
	p, err := jsonpatch.DecodePatch(patch)
	if err != nil {
		return bad("patch cannot be decoded")
	}
	opts := jsonpatch.NewApplyOptions()
	opts.SupportNegativeIndices = false
	opts.AccumulatedCopySizeLimit = patchCopyLimit
	opts.EnsurePathExistsOnAdd = false
	out, err := p.ApplyWithOptions(docJSON, opts)
	if err != nil {
		return bad("patch does not apply: %s", shortPatchErr(err))
	}
	v, err := DecodeStrict(out)
	if err != nil {
		return bad("patched JSON does not decode")
	}
	return v, nil
}

func shortPatchErr(err error) string {
	s := err.Error()
	if i := strings.IndexByte(s, ':'); i > 0 {
		s = s[:i]
	}
	if len(s) > 80 {
		s = s[:80]
	}
	return s
}

// validPointer reports whether p is an RFC 6901 JSON Pointer: "/"-led
// tokens where "~" is only followed by "0" or "1".
func validPointer(p string) bool {
	if !strings.HasPrefix(p, "/") {
		return false
	}
	for i := 0; i < len(p); i++ {
		if p[i] == '~' && (i+1 == len(p) || (p[i+1] != '0' && p[i+1] != '1')) {
			return false
		}
	}
	return true
}

// underFlagged reports whether p is at or below the path of some error.
// An error at the root (a parse error) flags nothing.
func underFlagged(p string, flagged extracttype.ErrorList) bool {
	for _, e := range flagged {
		if e.Path == "" {
			continue
		}
		if p == e.Path || strings.HasPrefix(p, e.Path+"/") {
			return true
		}
	}
	return false
}

// checkPatch applies a patch-form repair reply to the first reply's
// instance and validates the result. It returns the instance, the errors,
// the applied patch and the evidence of the grounded values found.
func (e *Extractor) checkPatch(resp openai.ChatCompletionResponse, prev any, flagged extracttype.ErrorList, in Input, text *runText) (any, extracttype.ErrorList, json.RawMessage, []extracttype.Evidence) {
	content, errs := e.replyContent(resp, patchToolName)
	if len(errs) > 0 {
		return nil, errs, nil, nil
	}
	raw := strings.TrimSpace(content)
	if m := fenceBlock.FindStringSubmatch(raw); m != nil {
		raw = strings.TrimSpace(m[1])
	}
	ops, errs := patchOperations(raw)
	if len(errs) > 0 {
		return nil, errs, nil, nil
	}
	inst, errs := ApplyRepairPatch(prev, []byte(ops), flagged)
	if len(errs) > 0 {
		return nil, errs, nil, nil
	}
	if e.sent(in.Schema).addedNull {
		dropAddedNulls(in.Schema.doc, in.Schema.doc, inst, 0)
	}
	verrs := checkStrings(inst, "")
	serrs, ev := in.Schema.validate(inst, text)
	verrs = append(verrs, serrs...)
	verrs.Sort()
	return inst, verrs, json.RawMessage(ops), ev
}

// patchOperations returns the RFC 6902 array of a patch reply: the reply
// itself when it is an array (what a model answers unconstrained), or the
// "operations" array of an object holding only that (what PatchSchema
// asks for, and what a server enforcing it answers). Anything else is one
// KindPatchInvalid error.
func patchOperations(reply string) (string, extracttype.ErrorList) {
	bad := extracttype.ErrorList{{Kind: extracttype.KindPatchInvalid, Keyword: "patch",
		Message: `patch is not a JSON array of operations, nor an object holding one in "operations"`}}
	if len(reply) > MaxPatchBytes+64 {
		return "", extracttype.ErrorList{{Kind: extracttype.KindPatchInvalid, Keyword: "patch", Message: fmt.Sprintf("patch is longer than %d bytes", MaxPatchBytes)}}
	}
	if !strings.HasPrefix(reply, "{") {
		return reply, nil
	}
	if _, err := DecodeStrict([]byte(reply)); err != nil { // one object, no duplicate key
		return "", bad
	}
	var obj map[string]json.RawMessage
	if err := json.Unmarshal([]byte(reply), &obj); err != nil || len(obj) != 1 {
		return "", bad
	}
	ops, ok := obj["operations"]
	if !ok {
		return "", bad
	}
	s := strings.TrimSpace(string(ops))
	if !strings.HasPrefix(s, "[") {
		return "", bad
	}
	return s, nil
}

package llmsim

import (
	"bytes"
	"encoding/json"
	"sync"
	"sync/atomic"
)

// Decoding a request body is most of the cost of a call outside the
// filler, and most of a body is its JSON Schema, the same in every call.
// decodeRequest therefore cuts a schema it has seen out of the body
// before decoding the rest, and puts it back after.

// decodeRequest decodes body into req as json.Decoder.Decode does: the
// first JSON value, ignoring what follows. It returns Decode's error.
func (k *knownSchemas) decodeRequest(body []byte, req *chatRequest) error {
	if k.decodeCut(body, req) {
		return nil
	}
	// Unmarshal takes one pass less than a Decoder; where it succeeds,
	// the body is one JSON value, which a Decoder decodes the same way.
	if err := json.Unmarshal(body, req); err == nil {
		k.remember(req)
		return nil
	}
	*req = chatRequest{}
	return json.NewDecoder(bytes.NewReader(body)).Decode(req)
}

// knownSchemas holds the schemas of recent requests, most recent first.
type knownSchemas struct {
	mu   sync.Mutex
	list atomic.Pointer[[][]byte] // never changed once stored
}

// Bounds of knownSchemas: how many it holds, and the shortest schema
// worth cutting out.
const (
	maxKnownSchemas    = 4
	minKnownSchemaSize = 512
)

// schemaMarker stands in a body for a schema cut out of it. It is a JSON
// number no client sends, and no proper prefix of it is also a suffix, so
// it occurs in a cut body only where it was put when the body held no
// copy of it.
var schemaMarker = []byte(`-7.71e7771771771771`)

// decodeCut decodes body with a known schema cut out and reports whether
// it could. It can when the body holds a known schema, and the body with
// the marker in its place decodes with the marker as the schema of the
// response format or of a tool: then the body decodes the same way with
// the schema there, since both are whole JSON values.
func (k *knownSchemas) decodeCut(body []byte, req *chatRequest) bool {
	list := k.list.Load()
	if list == nil || bytes.Contains(body, schemaMarker) {
		return false
	}
	for _, schema := range *list {
		at := bytes.Index(body, schema)
		if at < 0 {
			continue
		}
		cut := make([]byte, 0, len(body)-len(schema)+len(schemaMarker))
		cut = append(cut, body[:at]...)
		cut = append(cut, schemaMarker...)
		cut = append(cut, body[at+len(schema):]...)
		var r chatRequest
		if json.Unmarshal(cut, &r) != nil {
			return false
		}
		slots := r.schemaSlots()
		n := 0
		for _, raw := range slots {
			if bytes.Equal(*raw, schemaMarker) {
				*raw = schema // shared: a request's schema is only read
				n++
			}
		}
		if n != 1 {
			return false
		}
		*req = r
		return true
	}
	return false
}

// schemaSlots returns the fields of r that hold a schema: the response
// format's and each tool's parameters.
func (r *chatRequest) schemaSlots() []*json.RawMessage {
	var out []*json.RawMessage
	if rf := r.ResponseFormat; rf != nil && rf.JSONSchema != nil {
		out = append(out, &rf.JSONSchema.Schema)
	}
	for _, t := range r.Tools {
		if t.Function != nil {
			out = append(out, &t.Function.Parameters)
		}
	}
	return out
}

// remember adds the schemas of req worth cutting out to k.
func (k *knownSchemas) remember(req *chatRequest) {
	for _, raw := range req.schemaSlots() {
		if len(*raw) < minKnownSchemaSize || (*raw)[0] != '{' || bytes.Contains(*raw, schemaMarker) {
			continue
		}
		k.add(*raw)
	}
}

func (k *knownSchemas) add(schema []byte) {
	k.mu.Lock()
	defer k.mu.Unlock()
	var old [][]byte
	if p := k.list.Load(); p != nil {
		old = *p
	}
	for _, s := range old {
		if bytes.Equal(s, schema) {
			return
		}
	}
	list := append([][]byte{bytes.Clone(schema)}, old[:min(len(old), maxKnownSchemas-1)]...)
	k.list.Store(&list)
}

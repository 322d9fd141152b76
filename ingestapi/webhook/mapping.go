// Package webhook is what `ingest serve` needs to take another system's
// webhook as a message (docs/input.md, "Webhooks"): a Mapping from the
// body's JSON shape to a message's id, text, source and metadata by JSON
// Pointers (RFC 6901), a Verifier of the HMAC-SHA256 signatures
// helpdesks and payment services put on their webhooks (Stripe, GitHub,
// Slack, Zendesk, and a plain HMAC of the body), and a ReplayMemory that
// refuses a signature seen already within its timestamp's window.
//
// It holds no HTTP handler: package ingestapi routes POST
// /v1/webhooks/{name} and answers the errors of this package with the
// product's error codes.
package webhook

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/extractq/extractq/ingest"
	"github.com/extractq/extractq/pipeline"
)

// Mapping says where a webhook body holds a message's fields, each by a
// JSON Pointer (RFC 6901: "/ticket/id"; "" is the whole body).
type Mapping struct {
	// ID is the pointer to the message id: a string, or an integer
	// (kept as its decimal text). Required.
	ID string
	// Text is the pointer to the message text, a string. Required.
	Text string
	// Source is the pointer to the message's source, a string; "" for
	// none: the message's source is then DefaultSource.
	Source string
	// DefaultSource is the source of every message when Source is ""
	// (ingestapi sets the webhook's name).
	DefaultSource string
	// MetadataObject is a pointer to an object kept whole as the
	// message's metadata; "" for none. A body without it, or with null
	// there, gives no metadata from it.
	MetadataObject string
	// Metadata names metadata keys and the pointer to each one's value
	// (any JSON value). A pointer the body does not hold, or that holds
	// null, leaves its key out. With MetadataObject, these keys are
	// added to its members, replacing a member of the same name.
	Metadata map[string]string
}

// Check reports the first field of m that is not a valid pointer, or a
// required one that is missing, naming it as the configuration does
// ("id", "metadata.channel").
func (m Mapping) Check() error {
	if m.ID == "" {
		return errors.New("id: no pointer: name where the body holds the message id (such as /ticket/id)")
	}
	if m.Text == "" {
		return errors.New("text: no pointer: name where the body holds the message text (such as /ticket/description)")
	}
	fields := []struct{ name, p string }{{"id", m.ID}, {"text", m.Text}, {"source", m.Source}, {"metadata", m.MetadataObject}}
	for _, k := range slices.Sorted(maps.Keys(m.Metadata)) {
		if k == "" {
			return errors.New("metadata: a key is empty")
		}
		fields = append(fields, struct{ name, p string }{"metadata." + k, m.Metadata[k]})
	}
	for _, f := range fields {
		if err := CheckPointer(f.p); err != nil {
			return fmt.Errorf("%s: %w", f.name, err)
		}
	}
	return nil
}

// CheckPointer reports whether p is a JSON Pointer (RFC 6901, section 3):
// "" or "/"-led reference tokens in which "~" is followed only by "0" or
// "1". The error says what is wrong.
func CheckPointer(p string) error {
	if p == "" {
		return nil
	}
	if p[0] != '/' {
		return fmt.Errorf("%q is not a JSON Pointer: it must start with \"/\" (RFC 6901), as in \"/%s\"", p, p)
	}
	if !utf8.ValidString(p) {
		return fmt.Errorf("%q is not valid UTF-8", p)
	}
	for i := 0; i < len(p); i++ {
		if p[i] == '~' && (i+1 == len(p) || (p[i+1] != '0' && p[i+1] != '1')) {
			return fmt.Errorf("%q is not a JSON Pointer: \"~\" at byte %d is not followed by 0 or 1 (write a \"~\" as ~0, a \"/\" as ~1)", p, i+1)
		}
	}
	return nil
}

// MappingError is Map's error when the body does not fit the mapping: a
// pointer it does not hold, or a value of the wrong type there. Field is
// the message's field ("id", "text", "source", "metadata" or
// "metadata.KEY"), Pointer its pointer.
type MappingError struct {
	Field   string
	Pointer string
	Reason  string
}

func (e *MappingError) Error() string {
	return fmt.Sprintf("%s (pointer %q): %s", e.Field, e.Pointer, e.Reason)
}

// BodyError is Map's error when the body is not one JSON value (or holds
// a key twice, or a lone UTF-16 surrogate escape, or invalid UTF-8).
type BodyError struct{ Reason string }

func (e *BodyError) Error() string { return e.Reason }

// Map reads body, one JSON value, and returns the message m says it
// holds. Its error is a *BodyError when body is not JSON as RFC 8259
// has it (UTF-8, one value) or holds a key twice or a lone surrogate
// escape (which would silently become U+FFFD, merging ids), and a
// *MappingError naming the field and the pointer when the body lacks the
// id or the text, or holds a value of the wrong type. The message's
// values are then checked by ingest.CheckMessage, as a line's are.
func (m Mapping) Map(body []byte) (ingest.Message, error) {
	var msg ingest.Message
	if !utf8.Valid(body) {
		return msg, &BodyError{Reason: fmt.Sprintf("the body is not valid UTF-8 (byte %d): JSON is UTF-8 (RFC 8259, section 8.1)", invalidAt(body)+1)}
	}
	if pipeline.HasLoneSurrogate(string(body)) {
		return msg, &BodyError{Reason: "the body holds a lone UTF-16 surrogate escape (such as \\ud800), which is no character: refused, not replaced"}
	}
	doc, err := pipeline.DecodeStrict(body)
	if err != nil {
		if dk, ok := errors.AsType[*pipeline.DuplicateKeyError](err); ok {
			return msg, &BodyError{Reason: fmt.Sprintf("the body holds the key %s twice", dk.Path)}
		}
		return msg, &BodyError{Reason: "the body is not JSON: " + strings.TrimPrefix(err.Error(), "json: ")}
	}
	get := func(field, p string) (any, error) {
		v, err := Resolve(doc, p)
		if err != nil {
			return nil, &MappingError{Field: field, Pointer: p, Reason: err.Error()}
		}
		return v, nil
	}
	v, err := get("id", m.ID)
	if err != nil {
		return msg, err
	}
	switch id := v.(type) {
	case string:
		msg.ID = id
	case json.Number:
		if !ingest.IsIntegerID(id.String()) {
			return msg, &MappingError{Field: "id", Pointer: m.ID, Reason: fmt.Sprintf("the number %s is not an integer; an id is a string or an integer", id)}
		}
		msg.ID = id.String()
	default:
		return msg, &MappingError{Field: "id", Pointer: m.ID, Reason: "the body holds " + describe(v) + " there; an id is a string or an integer"}
	}
	if v, err = get("text", m.Text); err != nil {
		return msg, err
	}
	text, ok := v.(string)
	if !ok {
		return msg, &MappingError{Field: "text", Pointer: m.Text, Reason: "the body holds " + describe(v) + " there; the text is a string"}
	}
	msg.Text = text
	msg.Source = m.DefaultSource
	if m.Source != "" {
		if v, err = get("source", m.Source); err != nil {
			return msg, err
		}
		switch s := v.(type) {
		case string:
			msg.Source = s
		case json.Number:
			msg.Source = s.String()
		default:
			return msg, &MappingError{Field: "source", Pointer: m.Source, Reason: "the body holds " + describe(v) + " there; a source is a string"}
		}
	}
	meta := map[string]any{}
	if m.MetadataObject != "" {
		if v, err := Resolve(doc, m.MetadataObject); err == nil && v != nil {
			obj, ok := v.(map[string]any)
			if !ok {
				return msg, &MappingError{Field: "metadata", Pointer: m.MetadataObject, Reason: "the body holds " + describe(v) + " there; metadata is an object"}
			}
			maps.Copy(meta, obj)
		}
	}
	for k, p := range m.Metadata {
		if v, err := Resolve(doc, p); err == nil && v != nil {
			meta[k] = v
		}
	}
	msg.Metadata = meta
	return msg, nil
}

// Resolve returns the value at JSON Pointer p in doc, a value decoded by
// pipeline.DecodeStrict (objects map[string]any, arrays []any). Its
// error says where the body stops holding p: the member missing, an
// array index out of range or not one (RFC 6901, section 4: "0", or
// digits without a leading zero), or a value that is neither an object
// nor an array, each named by the pointer so far.
func Resolve(doc any, p string) (any, error) {
	if err := CheckPointer(p); err != nil {
		return nil, err
	}
	if p == "" {
		return doc, nil
	}
	cur := doc
	at := ""
	for _, raw := range strings.Split(p[1:], "/") {
		tok := strings.ReplaceAll(strings.ReplaceAll(raw, "~1", "/"), "~0", "~")
		where := "the body"
		if at != "" {
			where = strconv.Quote(at)
		}
		switch c := cur.(type) {
		case map[string]any:
			v, ok := c[tok]
			if !ok {
				return nil, fmt.Errorf("not found: %s has no member %q", where, tok)
			}
			cur = v
		case []any:
			i, err := strconv.Atoi(tok)
			if err != nil || i < 0 || (len(tok) > 1 && tok[0] == '0') || tok[0] == '+' {
				return nil, fmt.Errorf("not found: %s is an array and %q is not an index", where, tok)
			}
			if i >= len(c) {
				return nil, fmt.Errorf("not found: %s is an array of %d, with no index %d", where, len(c), i)
			}
			cur = c[i]
		default:
			return nil, fmt.Errorf("not found: %s is %s, not an object or an array", where, describe(cur))
		}
		at += "/" + raw
	}
	return cur, nil
}

// describe names the JSON type of v: "an object", "null", "the number 3".
func describe(v any) string {
	switch x := v.(type) {
	case nil:
		return "null"
	case map[string]any:
		return "an object"
	case []any:
		return "an array"
	case bool:
		return "the boolean " + strconv.FormatBool(x)
	case json.Number:
		return "the number " + x.String()
	case string:
		return "a string"
	}
	return fmt.Sprintf("%T", v)
}

// invalidAt returns the offset of the first byte of b that is not valid
// UTF-8.
func invalidAt(b []byte) int {
	for i := 0; i < len(b); {
		r, n := utf8.DecodeRune(b[i:])
		if r == utf8.RuneError && n == 1 {
			return i
		}
		i += n
	}
	return len(b)
}

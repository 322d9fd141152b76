package extracttype

import (
	"fmt"
	"regexp"
	"sort"
	"strings"
)

// Error is one failure, as the repair prompt, the triage view and the
// failure-analytics rows all see it.
//
// Path is a JSON Pointer (RFC 6901) to the field as the reader means it: a
// missing required property is reported at the property's own path. Keyword
// is the JSON Schema keyword (for KindSchema) or the rule name (for
// KindRule, such as "grounded"). Message is short and never carries the
// customer's values.
type Error struct {
	Kind    Kind   `json:"kind"`
	Path    string `json:"path"`
	Keyword string `json:"keyword,omitempty"`
	Message string `json:"message"`
}

// Error returns "path: message", the line format of the repair prompt. The
// document root is shown as "/".
func (e Error) Error() string {
	p := e.Path
	if p == "" {
		p = "/"
	}
	return p + ": " + e.Message
}

var arrayIndex = regexp.MustCompile(`/[0-9]+(/|$)`)

// PathPattern returns Path with array indices folded to "*", for analytics:
// "/items/3/sku" becomes "/items/*/sku".
func (e Error) PathPattern() string {
	p := e.Path
	for {
		q := arrayIndex.ReplaceAllString(p, "/*$1")
		if q == p {
			return q
		}
		p = q
	}
}

// ErrorList is the one typed error list of a reply. The zero value is an
// empty list, meaning valid.
type ErrorList []Error

// Error joins the errors, one "path: message" a line, so an ErrorList can
// travel as an error.
func (l ErrorList) Error() string {
	lines := make([]string, len(l))
	for i, e := range l {
		lines[i] = e.Error()
	}
	return strings.Join(lines, "\n")
}

// Sort orders the list stably by path, then kind, then keyword, then
// message, so prompts and stored lists do not depend on map order.
func (l ErrorList) Sort() {
	sort.SliceStable(l, func(i, j int) bool {
		a, b := l[i], l[j]
		if a.Path != b.Path {
			return a.Path < b.Path
		}
		if a.Kind != b.Kind {
			return a.Kind < b.Kind
		}
		if a.Keyword != b.Keyword {
			return a.Keyword < b.Keyword
		}
		return a.Message < b.Message
	})
}

// Repairable reports whether every error in the list may be repaired, so
// the list is worth the one repair call. An empty list is not repairable.
func (l ErrorList) Repairable() bool {
	if len(l) == 0 {
		return false
	}
	for _, e := range l {
		if !e.Kind.Repairable() {
			return false
		}
	}
	return true
}

// Errorf builds an Error with a formatted message.
func Errorf(kind Kind, path, keyword, format string, args ...any) Error {
	return Error{Kind: kind, Path: path, Keyword: keyword, Message: fmt.Sprintf(format, args...)}
}

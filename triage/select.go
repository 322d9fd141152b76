package triage

import (
	"encoding/json"
	"fmt"
	"sort"
	"strconv"
	"strings"

	"github.com/extractq/extractq/extracttype"
	"github.com/extractq/extractq/pipeline"
)

// Select-to-fill (docs/triage.md, "An item"): on the item page, text
// selected in the message fills the field the reviewer was in with the
// selected text and, in a hidden input "s:<path>" = "<start>-<end>", where
// it is: code-point offsets into the stored text, End exclusive, as
// extracttype.Evidence has them (the page's script reads each segment's
// offset, Segment.At, and counts code points, not JavaScript's UTF-16
// units). The record's evidence for that field is then the span selected,
// not the first place the validator finds the value, once the span is
// checked to hold the value (spanEvidence).

// maxSpans bounds the spans a form may post.
const maxSpans = 500

// readSpans reads the form's "s:<path>" spans, leaving out those that are
// not "<start>-<end>" with 0 <= start < end.
func readSpans(form map[string][]string) map[string][2]int {
	var out map[string][2]int
	for k, vs := range form {
		path, ok := strings.CutPrefix(k, "s:")
		if !ok || len(vs) != 1 || len(out) >= maxSpans {
			continue
		}
		a, b, ok := strings.Cut(vs[0], "-")
		start, err1 := strconv.Atoi(a)
		end, err2 := strconv.Atoi(b)
		if !ok || err1 != nil || err2 != nil || start < 0 || end <= start {
			continue
		}
		if out == nil {
			out = map[string][2]int{}
		}
		out[path] = [2]int{start, end}
	}
	return out
}

// spanEvidence returns ev with the evidence of each field of spans
// replaced by its span when the span holds the field's value in text
// (exactly, or equal once normalised as grounding compares them:
// Normalized then), and errs with an error of kind rule, keyword
// "evidence", for each span that does not: out of the text, or holding
// other text than the value (edited after the selection). A span of a
// field the record does not hold, or holds null, is left out.
func spanEvidence(text string, record any, spans map[string][2]int, ev []extracttype.Evidence, errs extracttype.ErrorList) ([]extracttype.Evidence, extracttype.ErrorList) {
	if len(spans) == 0 {
		return ev, errs
	}
	runes := []rune(text)
	paths := make([]string, 0, len(spans))
	for p := range spans {
		paths = append(paths, p)
	}
	sort.Strings(paths)
	for _, path := range paths {
		sp := spans[path]
		v, ok := pipeline.ResolvePointer(record, path)
		var value string
		switch x := v.(type) {
		case string:
			value = x
		case json.Number:
			value = x.String()
		default:
			ok = false
		}
		if !ok {
			continue
		}
		if sp[1] > len(runes) {
			errs = append(errs, extracttype.Error{Kind: extracttype.KindRule, Path: path, Keyword: "evidence",
				Message: fmt.Sprintf("the span selected (%d to %d) is past the message's end (%d characters): select it again", sp[0], sp[1], len(runes))})
			continue
		}
		got := string(runes[sp[0]:sp[1]])
		e := extracttype.Evidence{Path: path, Start: sp[0], End: sp[1]}
		switch {
		case got == value:
		case pipeline.Normalize(got) == pipeline.Normalize(value) && pipeline.Normalize(value) != "":
			e.Normalized = true
		default:
			errs = append(errs, extracttype.Error{Kind: extracttype.KindRule, Path: path, Keyword: "evidence",
				Message: "the value is not the text selected for it: select it again, or clear the field and type it"})
			continue
		}
		kept := ev[:0:0]
		for _, x := range ev {
			if x.Path != path {
				kept = append(kept, x)
			}
		}
		ev = append(kept, e)
	}
	sort.SliceStable(ev, func(i, j int) bool { return ev[i].Start < ev[j].Start })
	errs.Sort()
	return ev, errs
}

package triage

import (
	"fmt"
	"sort"
	"strings"
	"unicode"
)

// Customer text is untrusted. html/template escapes it; this file makes
// the characters that escaping leaves invisible or active (bidi controls
// that reorder text, zero-width characters, C0/C1 controls, tag
// characters used to smuggle instructions) into visible, inert markers,
// and cuts the text into segments for highlighting. The page shows each
// message in a block with unicode-bidi: plaintext, and every short value
// in <bdi>, so right-to-left text stays inside its own box.

// Segment is a run of message text with one highlight, or one control
// character shown as a marker.
type Segment struct {
	// Text is the segment's text; empty for a control marker.
	Text string
	// Ctl is the marker shown for a control character ("RLO", "U+200B"),
	// and CtlTitle its description; both empty for plain text. CtlRune
	// is the control itself.
	Ctl, CtlTitle string
	CtlRune       rune
	// Mark is "" (plain), "found" (a grounded value the model found) or
	// "failing" (a found value whose field has an error).
	Mark string
	// Paths are the fields whose values cover the segment.
	Paths []string
	// Anchor is the id of the first segment of a highlight ("ev-3"), so
	// the editor can link to it; empty otherwise.
	Anchor string
	// At is the code-point offset in the stored text of the segment's
	// first character (of the control a marker shows). A segment's Text
	// is the stored text from At on, character for character: a dropped
	// CR ends a segment, so the page can turn a selection back into
	// stored offsets (select-to-fill, select.go).
	At int
}

// controlNames are the short names of the control characters customers'
// text is most likely to hold.
var controlNames = map[rune][2]string{
	0x00:   {"NUL", "NULL"},
	0x1B:   {"ESC", "ESCAPE"},
	0x7F:   {"DEL", "DELETE"},
	0x0D:   {"CR", "CARRIAGE RETURN"},
	0x0B:   {"VT", "LINE TABULATION"},
	0x0C:   {"FF", "FORM FEED"},
	0x00AD: {"SHY", "SOFT HYPHEN"},
	0x061C: {"ALM", "ARABIC LETTER MARK"},
	0x200B: {"ZWSP", "ZERO WIDTH SPACE"},
	0x200E: {"LRM", "LEFT-TO-RIGHT MARK"},
	0x200F: {"RLM", "RIGHT-TO-LEFT MARK"},
	0x2028: {"LSEP", "LINE SEPARATOR"},
	0x2029: {"PSEP", "PARAGRAPH SEPARATOR"},
	0x202A: {"LRE", "LEFT-TO-RIGHT EMBEDDING"},
	0x202B: {"RLE", "RIGHT-TO-LEFT EMBEDDING"},
	0x202C: {"PDF", "POP DIRECTIONAL FORMATTING"},
	0x202D: {"LRO", "LEFT-TO-RIGHT OVERRIDE"},
	0x202E: {"RLO", "RIGHT-TO-LEFT OVERRIDE"},
	0x2060: {"WJ", "WORD JOINER"},
	0x2066: {"LRI", "LEFT-TO-RIGHT ISOLATE"},
	0x2067: {"RLI", "RIGHT-TO-LEFT ISOLATE"},
	0x2068: {"FSI", "FIRST STRONG ISOLATE"},
	0x2069: {"PDI", "POP DIRECTIONAL ISOLATE"},
	0xFEFF: {"BOM", "ZERO WIDTH NO-BREAK SPACE"},
	0xFFFD: {"U+FFFD", "REPLACEMENT CHARACTER (an invalid byte in the input)"},
}

// isShownControl reports whether r is shown as a marker rather than as
// itself: C0 and C1 controls other than tab and newline, and format
// characters (Cf: bidi controls, zero-width characters, tag characters)
// other than the zero-width joiner and non-joiner, which emoji and several
// scripts need. Line and paragraph separators are shown too.
func isShownControl(r rune) bool {
	switch r {
	case '\n', '\t', 0x200C, 0x200D:
		return false
	case 0x2028, 0x2029, 0xFFFD:
		return true
	}
	return unicode.Is(unicode.Cc, r) || unicode.Is(unicode.Cf, r)
}

// controlMarker returns the marker and the description of control r.
func controlMarker(r rune) (string, string) {
	if n, ok := controlNames[r]; ok {
		return n[0], fmt.Sprintf("U+%04X %s (shown, not applied)", r, n[1])
	}
	return fmt.Sprintf("U+%04X", r), fmt.Sprintf("U+%04X control or format character (shown, not applied)", r)
}

// Span is a highlighted range of the message in code points, End
// exclusive, as extracttype.Evidence gives it.
type Span struct {
	Path       string
	Start, End int
	Failing    bool // the field has an error
}

// Segments cuts text into segments: control characters as markers, and
// the spans highlighted (overlapping spans merge; a segment is "failing"
// when any span covering it is). Spans out of range are clipped. A CR
// directly before a LF is dropped, so Windows line ends show as one
// line break.
func Segments(text string, spans []Span) []Segment {
	runes := []rune(text)
	// Boundaries where the set of covering spans changes.
	type edge struct {
		at    int
		span  int
		start bool
	}
	var edges []edge
	for i, s := range spans {
		start, end := max(0, s.Start), min(len(runes), s.End)
		if start >= end {
			continue
		}
		edges = append(edges, edge{start, i, true}, edge{end, i, false})
	}
	sort.SliceStable(edges, func(i, j int) bool { return edges[i].at < edges[j].at })

	var out []Segment
	active := map[int]bool{}
	var buf strings.Builder
	cur := Segment{}
	flush := func() {
		if buf.Len() > 0 {
			cur.Text = buf.String()
			out = append(out, cur)
			buf.Reset()
			cur.Anchor = ""
		}
	}
	state := func(anchor bool) Segment {
		if len(active) == 0 {
			return Segment{}
		}
		seg := Segment{Mark: "found"}
		idx := make([]int, 0, len(active))
		for i := range active {
			idx = append(idx, i)
		}
		sort.Ints(idx)
		for _, i := range idx {
			seg.Paths = append(seg.Paths, spans[i].Path)
			if spans[i].Failing {
				seg.Mark = "failing"
			}
		}
		if anchor {
			seg.Anchor = fmt.Sprintf("ev-%d", idx[len(idx)-1])
		}
		return seg
	}
	e := 0
	for i := 0; i <= len(runes); i++ {
		changed, started := false, false
		for e < len(edges) && edges[e].at == i {
			if edges[e].start {
				active[edges[e].span] = true
				started = true
			} else {
				delete(active, edges[e].span)
			}
			changed = true
			e++
		}
		if changed {
			flush()
			cur = state(started)
		}
		if buf.Len() == 0 {
			cur.At = i
		}
		if i == len(runes) {
			break
		}
		r := runes[i]
		if r == '\r' && i+1 < len(runes) && runes[i+1] == '\n' {
			flush()
			continue
		}
		if isShownControl(r) {
			flush()
			m := cur
			m.Text = ""
			m.At, m.CtlRune = i, r
			m.Ctl, m.CtlTitle = controlMarker(r)
			out = append(out, m)
			cur.Anchor = ""
			continue
		}
		buf.WriteRune(r)
	}
	flush()
	return out
}

// Visible returns s with every control character replaced by its marker
// in angle brackets ("⟨RLO⟩"), for places that show short plain text such
// as ids and field values in a table or an attribute.
func Visible(s string) string {
	if !strings.ContainsFunc(s, isShownControl) && !strings.Contains(s, "\r") {
		return s
	}
	var b strings.Builder
	for _, r := range s {
		if isShownControl(r) {
			m, _ := controlMarker(r)
			b.WriteString("⟨" + m + "⟩")
			continue
		}
		b.WriteRune(r)
	}
	return b.String()
}

// HasControls reports whether s holds a character Segments shows as a
// marker, so the page can say so.
func HasControls(s string) bool { return strings.ContainsFunc(s, isShownControl) }

// HasRTL reports whether s holds right-to-left letters.
func HasRTL(s string) bool {
	return strings.ContainsFunc(s, func(r rune) bool {
		return unicode.In(r, unicode.Hebrew, unicode.Arabic, unicode.Syriac, unicode.Thaana, unicode.Nko)
	})
}

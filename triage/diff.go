package triage

import (
	"bytes"
	"encoding/json"
	"strings"
)

// DiffLine is one line of a line diff: Op is ' ' (in both), '-' (only in
// the old text) or '+' (only in the new one).
type DiffLine struct {
	Op   string
	Text string
}

// maxDiffLines bounds each side of a diff; longer texts are not diffed
// (the quadratic table would be too large).
const maxDiffLines = 1500

// LineDiff returns the line diff of a and b by longest common
// subsequence, or nil when either has more than maxDiffLines lines.
func LineDiff(a, b string) []DiffLine {
	x, y := strings.Split(a, "\n"), strings.Split(b, "\n")
	if len(x) > maxDiffLines || len(y) > maxDiffLines {
		return nil
	}
	// lcs[i][j] is the LCS length of x[i:] and y[j:].
	lcs := make([][]int32, len(x)+1)
	for i := range lcs {
		lcs[i] = make([]int32, len(y)+1)
	}
	for i := len(x) - 1; i >= 0; i-- {
		for j := len(y) - 1; j >= 0; j-- {
			if x[i] == y[j] {
				lcs[i][j] = lcs[i+1][j+1] + 1
			} else {
				lcs[i][j] = max(lcs[i+1][j], lcs[i][j+1])
			}
		}
	}
	var out []DiffLine
	i, j := 0, 0
	for i < len(x) && j < len(y) {
		switch {
		case x[i] == y[j]:
			out = append(out, DiffLine{" ", x[i]})
			i++
			j++
		case lcs[i+1][j] >= lcs[i][j+1]:
			out = append(out, DiffLine{"-", x[i]})
			i++
		default:
			out = append(out, DiffLine{"+", y[j]})
			j++
		}
	}
	for ; i < len(x); i++ {
		out = append(out, DiffLine{"-", x[i]})
	}
	for ; j < len(y); j++ {
		out = append(out, DiffLine{"+", y[j]})
	}
	return out
}

// prettyJSON returns v as indented JSON with sorted keys, the form diffs
// compare; "" if v cannot be encoded.
func prettyJSON(v any) string {
	var out bytes.Buffer
	enc := json.NewEncoder(&out)
	enc.SetEscapeHTML(false) // the page escapes; keep <, > and & readable
	enc.SetIndent("", "  ")
	if err := enc.Encode(v); err != nil {
		return ""
	}
	return strings.TrimSuffix(out.String(), "\n")
}

// compactJSON returns v as compact JSON without HTML escapes.
func compactJSON(v any) ([]byte, error) {
	var out bytes.Buffer
	enc := json.NewEncoder(&out)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(out.Bytes(), []byte("\n")), nil
}

// prettyRaw indents a JSON document as is, or returns it unchanged when
// it is not JSON.
func prettyRaw(doc []byte) string {
	var out bytes.Buffer
	if err := json.Indent(&out, doc, "", "  "); err != nil {
		return string(doc)
	}
	return out.String()
}

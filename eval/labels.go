package eval

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
)

// Label is one labelled message: a line of a labels file.
//
// A line is a JSON object with "id" (the message's external id, required),
// "source" (optional; when given the message's source must match too),
// "text" (optional: the message text, used to decide whether a grounded
// value is in the text when "expected_in_text" is absent),
// "expected" (an object: the expected record, required; a key it lacks is
// unlabelled) and "expected_in_text" (optional: the expected keys whose
// value occurs in the text, as the bundled sample gives them). Other keys
// (the sample's "provenance", "meta") are ignored.
type Label struct {
	ID       string
	Source   string
	Text     string
	Expected map[string]any
	// InText is the set of "expected_in_text" keys; nil when the line has
	// no such key (then the text decides).
	InText map[string]bool
	// Line is the 1-based line number in the labels file.
	Line int
}

// maxLabelLine is the longest labels line read, in bytes.
const maxLabelLine = 16 << 20

// ReadLabels reads a labels file (JSON Lines, blank lines skipped). The
// error names the line and what is wrong with it: not valid JSON (with
// the byte of the line where it goes wrong), a line that is not an
// object, no "id", a key of the wrong type ("expected" not an object,
// "expected_in_text" not an array of the expected keys), an id (with its
// source) given twice.
func ReadLabels(r io.Reader) ([]Label, error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), maxLabelLine)
	var out []Label
	seen := map[[2]string]int{}
	for n := 1; sc.Scan(); n++ {
		if len(bytes.TrimSpace(sc.Bytes())) == 0 {
			continue
		}
		l, err := parseLabelLine(n, sc.Bytes())
		if err != nil {
			return nil, err
		}
		key := [2]string{l.Source, l.ID}
		if prev, ok := seen[key]; ok {
			return nil, fmt.Errorf("labels line %d: id %q (source %q) is labelled on line %d too", n, l.ID, l.Source, prev)
		}
		seen[key] = n
		out = append(out, l)
	}
	if err := sc.Err(); err != nil {
		if errors.Is(err, bufio.ErrTooLong) {
			return nil, fmt.Errorf("labels: a line is longer than %d bytes", maxLabelLine)
		}
		return nil, fmt.Errorf("labels: %w", err)
	}
	if len(out) == 0 {
		return nil, errors.New("labels: no labelled line")
	}
	return out, nil
}

// parseLabelLine reads line n of a labels file, line (not blank).
func parseLabelLine(n int, line []byte) (Label, error) {
	d := json.NewDecoder(bytes.NewReader(line))
	d.UseNumber()
	var v any
	err := d.Decode(&v)
	if se, ok := errors.AsType[*json.SyntaxError](err); ok {
		return Label{}, fmt.Errorf("labels line %d, byte %d: not valid JSON: %s", n, se.Offset, se.Error())
	}
	if errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF) {
		return Label{}, fmt.Errorf("labels line %d, byte %d: the line ends before its JSON object does (is it cut off?)", n, len(line))
	}
	if err != nil {
		return Label{}, fmt.Errorf("labels line %d: not valid JSON: %w", n, err)
	}
	if rest := line[d.InputOffset():]; len(bytes.TrimSpace(rest)) > 0 {
		at := int(d.InputOffset()) + len(rest) - len(bytes.TrimLeft(rest, " \t\r")) + 1
		return Label{}, fmt.Errorf("labels line %d, byte %d: more follows the line's JSON object: one object per line", n, at)
	}
	obj, ok := v.(map[string]any)
	if !ok {
		return Label{}, fmt.Errorf("labels line %d: %s, not a JSON object: each line is one object with \"id\" and \"expected\"", n, kindOf(v))
	}
	str := func(key string) (string, error) {
		x, ok := obj[key]
		if !ok || x == nil {
			return "", nil
		}
		s, ok := x.(string)
		if !ok {
			return "", fmt.Errorf("labels line %d: %q is %s, want a string", n, key, kindOf(x))
		}
		return s, nil
	}
	var l Label
	l.Line = n
	if l.ID, err = str("id"); err != nil {
		return Label{}, err
	}
	if l.ID == "" {
		return Label{}, fmt.Errorf("labels line %d: no \"id\"", n)
	}
	if l.Source, err = str("source"); err != nil {
		return Label{}, err
	}
	if l.Text, err = str("text"); err != nil {
		return Label{}, err
	}
	if l.Expected, ok = obj["expected"].(map[string]any); !ok {
		what := "missing"
		if x, has := obj["expected"]; has {
			what = kindOf(x)
		}
		return Label{}, fmt.Errorf("labels line %d (id %q): \"expected\" is not a JSON object (%s): want the expected record, an object", n, l.ID, what)
	}
	if x, has := obj["expected_in_text"]; has && x != nil {
		keys, ok := x.([]any)
		if !ok {
			return Label{}, fmt.Errorf("labels line %d (id %q): \"expected_in_text\" is %s, want an array of the \"expected\" keys whose value is in the text", n, l.ID, kindOf(x))
		}
		l.InText = map[string]bool{}
		for i, k := range keys {
			ks, ok := k.(string)
			if !ok {
				return Label{}, fmt.Errorf("labels line %d (id %q): \"expected_in_text\" item %d is %s, want a key of \"expected\" (a string)", n, l.ID, i, kindOf(k))
			}
			if _, ok := l.Expected[ks]; !ok {
				return Label{}, fmt.Errorf("labels line %d (id %q): \"expected_in_text\" names %q, which is not a key of \"expected\"", n, l.ID, ks)
			}
			l.InText[ks] = true
		}
	}
	return l, nil
}

// kindOf names the JSON type of v (decoded with UseNumber), for errors.
func kindOf(v any) string {
	switch v := v.(type) {
	case nil:
		return "null"
	case string:
		return "a string"
	case json.Number:
		return "a number (" + v.String() + ")"
	case bool:
		return "true or false"
	case []any:
		return "an array"
	case map[string]any:
		return "an object"
	}
	return fmt.Sprintf("%T", v)
}

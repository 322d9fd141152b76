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

type labelLine struct {
	ID             string          `json:"id"`
	Source         string          `json:"source"`
	Text           string          `json:"text"`
	Expected       json.RawMessage `json:"expected"`
	ExpectedInText *[]string       `json:"expected_in_text"`
}

// maxLabelLine is the longest labels line read, in bytes.
const maxLabelLine = 16 << 20

// ReadLabels reads a labels file (JSON Lines, blank lines skipped). The
// error names the line and what is wrong with it: not a JSON object, no
// "id", no "expected" object, an id (with its source) given twice.
func ReadLabels(r io.Reader) ([]Label, error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), maxLabelLine)
	var out []Label
	seen := map[[2]string]int{}
	for n := 1; sc.Scan(); n++ {
		b := bytes.TrimSpace(sc.Bytes())
		if len(b) == 0 {
			continue
		}
		var l labelLine
		if err := json.Unmarshal(b, &l); err != nil {
			return nil, fmt.Errorf("labels line %d: not a JSON object: %w", n, err)
		}
		if l.ID == "" {
			return nil, fmt.Errorf("labels line %d: no \"id\"", n)
		}
		var exp map[string]any
		d := json.NewDecoder(bytes.NewReader(l.Expected))
		d.UseNumber()
		if len(l.Expected) == 0 || d.Decode(&exp) != nil || exp == nil {
			return nil, fmt.Errorf("labels line %d (id %q): \"expected\" is not a JSON object", n, l.ID)
		}
		key := [2]string{l.Source, l.ID}
		if prev, ok := seen[key]; ok {
			return nil, fmt.Errorf("labels line %d: id %q (source %q) is labelled on line %d too", n, l.ID, l.Source, prev)
		}
		seen[key] = n
		lab := Label{ID: l.ID, Source: l.Source, Text: l.Text, Expected: exp, Line: n}
		if l.ExpectedInText != nil {
			lab.InText = map[string]bool{}
			for _, k := range *l.ExpectedInText {
				lab.InText[k] = true
			}
		}
		out = append(out, lab)
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

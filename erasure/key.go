package erasure

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"unicode/utf8"

	"github.com/extractq/extractq/ingest"
	"github.com/extractq/extractq/pipeline"
	"github.com/extractq/extractq/store"
)

// ParseKey reads a message key to erase from v, a JSON object decoded by
// pipeline.DecodeStrict: {"source": S, "id": ID}, keys case-sensitive,
// "source" optional (defaultSource then), "id" a string or an integer
// (kept as its decimal text, as ingest keeps it) that passes ingest's
// checks of an id (ingest.CheckID). The error names what is wrong.
func ParseKey(v any, defaultSource string) (store.MessageKey, error) {
	key := store.MessageKey{Source: defaultSource}
	obj, ok := v.(map[string]any)
	if !ok {
		return key, errors.New(`not a JSON object; want {"source": S, "id": ID}`)
	}
	for k := range obj {
		if k != "source" && k != "id" {
			return key, fmt.Errorf(`unknown key %q (keys are case-sensitive); want {"source": S, "id": ID}`, k)
		}
	}
	if src, ok := obj["source"]; ok {
		s, isString := src.(string)
		if !isString || strings.ContainsRune(s, 0) {
			return key, errors.New(`"source" must be a string without NUL`)
		}
		key.Source = s
	}
	var id string
	switch t := obj["id"].(type) {
	case nil:
		if _, given := obj["id"]; !given {
			return key, errors.New(`the object has no "id"`)
		}
		return key, errors.New(`"id" must be a string or an integer`)
	case string:
		id = t
	case json.Number:
		if !ingest.IsIntegerID(t.String()) {
			return key, fmt.Errorf(`"id" must be a string or an integer, not %s`, t)
		}
		id = t.String()
	default:
		return key, errors.New(`"id" must be a string or an integer`)
	}
	if err := ingest.CheckID(id); err != nil {
		return key, err
	}
	key.ExternalID = id
	return key, nil
}

// LoneSurrogateRefused says why a JSON key holding a lone UTF-16
// surrogate escape (\ud800 without its pair) is refused: JSON decoding
// reads it as U+FFFD, so the key would name the message stored with
// U+FFFD in its place; ingest refuses such ids (docs/input.md), so it
// names no stored message.
const LoneSurrogateRefused = `a lone UTF-16 surrogate escape (such as \ud800 without its pair) is no character: ` +
	`ids and sources are kept byte for byte, so it names no stored message; nothing was erased`

// ReadKeys reads message keys, one per line: a plain id (of source), or a
// JSON object {"source": S, "id": ID} read as strictly as ingest reads a
// line (ParseKey; keys case-sensitive and given once, nothing after the
// object). Blank lines are skipped, and a byte order mark at the start. A
// line that is not UTF-8 text or holds a NUL (a compressed or UTF-16 file,
// say) is an error, naming the line, as is a bad JSON line and one holding
// a lone surrogate escape (LoneSurrogateRefused). Keys given
// twice are returned twice: Erase counts them once.
func ReadKeys(r io.Reader, source string) ([]store.MessageKey, error) {
	var keys []store.MessageKey
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64*1024), 1<<20)
	for n := 1; sc.Scan(); n++ {
		raw := sc.Text()
		if n == 1 {
			raw = strings.TrimPrefix(raw, "\ufeff")
		}
		if !utf8.ValidString(raw) || strings.ContainsRune(raw, 0) {
			return nil, fmt.Errorf("line %d is not UTF-8 text (a compressed or UTF-16 file?): give one id per line, in UTF-8", n)
		}
		line := strings.TrimSpace(raw)
		switch {
		case line == "":
			continue
		case strings.HasPrefix(line, "{"):
			// As for bytes that are not UTF-8: decoding would read a lone
			// surrogate escape as U+FFFD, and the key would name the
			// message stored with U+FFFD there, another customer's.
			if pipeline.HasLoneSurrogate(line) {
				return nil, fmt.Errorf("line %d: %s", n, LoneSurrogateRefused)
			}
			v, err := pipeline.DecodeStrict([]byte(line))
			if dk, ok := errors.AsType[*pipeline.DuplicateKeyError](err); ok {
				return nil, fmt.Errorf("line %d: key %s occurs twice; give it once", n, dk.Path)
			}
			if err != nil {
				return nil, fmt.Errorf("line %d: %v (want one {\"source\": S, \"id\": ID} a line)", n, err)
			}
			key, err := ParseKey(v, source)
			if err != nil {
				return nil, fmt.Errorf("line %d: %v", n, err)
			}
			keys = append(keys, key)
		default:
			keys = append(keys, store.MessageKey{Source: source, ExternalID: line})
		}
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	return keys, nil
}

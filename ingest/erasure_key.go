package ingest

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/extractq/extractq/store"
)

// ErasureKey reads a message key to erase from v, a JSON object decoded
// by pipeline.DecodeStrict: {"source": S, "id": ID}, keys case-sensitive,
// "source" optional (defaultSource then), "id" a string or an integer
// (kept as its decimal text) that passes ingest's checks of an id. The
// error names what is wrong.
func ErasureKey(v any, defaultSource string) (store.MessageKey, error) {
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
		if !isInteger(t.String()) {
			return key, fmt.Errorf(`"id" must be a string or an integer, not %s`, t)
		}
		id = t.String()
	default:
		return key, errors.New(`"id" must be a string or an integer`)
	}
	var in Input
	if err := in.setID(id); err != nil {
		return key, err
	}
	key.ExternalID = in.ID
	return key, nil
}

// Package export writes a batch's results as files for the tools a team
// runs next: JSON lines (one store.BatchResult per line, as the HTTP
// API's GET /v1/batches/{id}/results sends them) and CSV for people who
// open spreadsheets. Both stream: a writer holds one row at a time, so a
// batch of a million messages never sits in memory (docs/reports.md,
// "Results as files").
//
// The CSV follows RFC 4180 (comma separated, fields with a comma, quote
// or line break quoted, quotes doubled, CRLF line ends), in UTF-8, with a
// header. Its columns are stable: they come from the schema, not from the
// rows, so every batch of one schema version has the same columns in the
// same order, whatever its records hold.
//
//   - First the message's columns, named with a leading underscore so
//     they cannot collide with a record field: _message_id, _id, _source,
//     _status, _triage, _run_no, _schema_version, _outcome, _created_by,
//     _created_at, _erased_at.
//   - Then one column per record field, in the schema's order: a field of
//     a nested object by its dotted path (order.id); an array, whatever it
//     holds, as its JSON text in one column (["a","b"]), so a row never
//     grows columns; an object with no declared properties likewise.
//   - null and a missing field are an empty cell; true and false as such;
//     a number as its JSON text; a string as it is, except that a string
//     starting with =, +, -, @, a tab or a carriage return gets a leading
//     single quote, so a spreadsheet does not run customer text as a
//     formula (OWASP, "CSV Injection").
package export

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
)

// MetaColumns are the CSV's first columns, about the message and its
// result rather than the record.
var MetaColumns = []string{"_message_id", "_id", "_source", "_status", "_triage", "_run_no",
	"_schema_version", "_outcome", "_created_by", "_created_at", "_erased_at"}

// Column is one record column of the CSV: the field's dotted path and
// its keys from the record's root.
type Column struct {
	Name string
	Path []string
}

// Columns returns the record columns of schema (a JSON Schema document
// whose root is an object with properties), in the order its properties
// are written. The error names the property at fault: a name holding a
// dot (the CSV could not tell it from a nested field), or one starting
// with an underscore at the root (it could collide with MetaColumns).
func Columns(schema []byte) ([]Column, error) {
	var cols []Column
	if err := walk(schema, nil, &cols); err != nil {
		return nil, fmt.Errorf("export: schema: %w", err)
	}
	return cols, nil
}

func walk(schema json.RawMessage, path []string, cols *[]Column) error {
	var s struct {
		Type       json.RawMessage `json:"type"`
		Properties json.RawMessage `json:"properties"`
	}
	if err := json.Unmarshal(schema, &s); err != nil {
		return fmt.Errorf("at %q: %w", strings.Join(path, "."), err)
	}
	props, err := orderedKeys(s.Properties)
	if err != nil {
		return fmt.Errorf("properties at %q: %w", strings.Join(path, "."), err)
	}
	if len(path) > 0 && (!hasType(s.Type, "object") || len(props) == 0) {
		*cols = append(*cols, Column{Name: strings.Join(path, "."), Path: slices.Clone(path)})
		return nil
	}
	for _, p := range props {
		if strings.Contains(p.key, ".") {
			return fmt.Errorf("property %q: a dot in a name would read as a nested field in the CSV", strings.Join(append(path, p.key), "/"))
		}
		if len(path) == 0 && strings.HasPrefix(p.key, "_") {
			return fmt.Errorf("property %q: a name starting with _ may collide with the CSV's own columns (%s)", p.key, strings.Join(MetaColumns, ", "))
		}
		if err := walk(p.value, append(path, p.key), cols); err != nil {
			return err
		}
	}
	return nil
}

// hasType reports whether a JSON Schema "type" (a string or a list)
// names t; an absent type allows anything but is not taken as an object.
func hasType(raw json.RawMessage, t string) bool {
	var one string
	if json.Unmarshal(raw, &one) == nil {
		return one == t
	}
	var many []string
	return json.Unmarshal(raw, &many) == nil && slices.Contains(many, t)
}

type keyValue struct {
	key   string
	value json.RawMessage
}

// orderedKeys returns the members of a JSON object in the order written
// (encoding/json's maps lose it); nil for an absent object.
func orderedKeys(raw json.RawMessage) ([]keyValue, error) {
	if len(bytes.TrimSpace(raw)) == 0 || string(bytes.TrimSpace(raw)) == "null" {
		return nil, nil
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	tok, err := dec.Token()
	if err != nil {
		return nil, err
	}
	if d, ok := tok.(json.Delim); !ok || d != '{' {
		return nil, fmt.Errorf("not an object")
	}
	var out []keyValue
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil, err
		}
		key, _ := tok.(string)
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			return nil, err
		}
		out = append(out, keyValue{key, v})
	}
	return out, nil
}

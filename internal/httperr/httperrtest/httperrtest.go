// Package httperrtest checks, for the tests of the HTTP servers, that an
// error answer has the one shape of package httperr and a code that
// docs/http-errors.md lists, with its status.
package httperrtest

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/extractq/extractq/internal/httperr"
)

// Extras are the members an error body may have besides {"error":
// {"code", "message"}}, as docs/http-errors.md lists them.
type Extras struct {
	// Fields are more members of "error", each required (triage's 422:
	// "errors" and "overridable").
	Fields []string
	// Beside allows members beside "error" (ingest serve's 422, and a
	// 503 part way: the report's fields).
	Beside bool
}

// Check checks that body, answered with status, is an error of the one
// shape: a JSON object holding "error" (and, with x.Beside, other
// members), whose value holds exactly "code", a documented code of that
// status, "message", not empty, and x.Fields. It returns the code ("" when
// there is none).
func Check(t testing.TB, what string, status int, body []byte, x Extras) httperr.Code {
	t.Helper()
	var top map[string]json.RawMessage
	if err := json.Unmarshal(body, &top); err != nil {
		t.Errorf("%s: the body is not a JSON object: %v\n%s", what, err, body)
		return ""
	}
	for k := range top {
		if k != "error" && !x.Beside {
			t.Errorf("%s: member %q beside \"error\"; want none: %s", what, k, body)
		}
	}
	var inner map[string]json.RawMessage
	if err := json.Unmarshal(top["error"], &inner); err != nil || inner == nil {
		t.Errorf("%s: \"error\" is not an object (%v): %s", what, err, body)
		return ""
	}
	var code, msg string
	if err := json.Unmarshal(inner["code"], &code); err != nil || code == "" {
		t.Errorf("%s: error.code is not a string (%v): %s", what, err, body)
	}
	if err := json.Unmarshal(inner["message"], &msg); err != nil || strings.TrimSpace(msg) == "" {
		t.Errorf("%s: error.message is not a string, or is empty (%v): %s", what, err, body)
	}
	for k := range inner {
		if k != "code" && k != "message" && !slices.Contains(x.Fields, k) {
			t.Errorf("%s: error has member %q; want code, message%s: %s", what, k, strings.Join(append([]string{""}, x.Fields...), ", "), body)
		}
	}
	for _, k := range x.Fields {
		if _, ok := inner[k]; !ok {
			t.Errorf("%s: error has no %q: %s", what, k, body)
		}
	}
	documented := DocumentedCodes(t)
	want, ok := documented[httperr.Code(code)]
	switch {
	case code == "":
	case !ok:
		t.Errorf("%s: code %q is not in the table of docs/http-errors.md", what, code)
	case want != status:
		t.Errorf("%s: code %q answered with status %d; docs/http-errors.md gives it %d", what, code, status, want)
	}
	return httperr.Code(code)
}

// DocumentedCodes returns the codes of the table under "## Codes" in
// docs/http-errors.md, with their statuses.
func DocumentedCodes(t testing.TB) map[httperr.Code]int {
	t.Helper()
	d, err := readDocs()
	if err != nil {
		t.Fatal(err)
	}
	return d.codes
}

// OldCodes returns the table under "## Codes before" in
// docs/http-errors.md: each old code of ingest serve, with the new one.
func OldCodes(t testing.TB) map[string]httperr.Code {
	t.Helper()
	d, err := readDocs()
	if err != nil {
		t.Fatal(err)
	}
	return d.old
}

// docTables are the tables of docs/http-errors.md.
type docTables struct {
	codes map[httperr.Code]int    // code: status
	old   map[string]httperr.Code // old code: new code
}

var readDocs = sync.OnceValues(func() (docTables, error) {
	var d docTables
	path, err := docsPath()
	if err != nil {
		return d, err
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return d, err
	}
	codes := map[httperr.Code]int{}
	old := map[string]httperr.Code{}
	for _, row := range tableRows(b, "## Codes") {
		if len(row) < 2 {
			return d, fmt.Errorf("%s: the codes table has a row %q without a status", path, row)
		}
		status, err := strconv.Atoi(row[1])
		if err != nil {
			return d, fmt.Errorf("%s: the codes table has a row %q without a status", path, row)
		}
		codes[httperr.Code(unquote(row[0]))] = status
	}
	for _, row := range tableRows(b, "## Codes before") {
		if len(row) < 3 {
			return d, fmt.Errorf("%s: the table of old codes has a row %q without the new code", path, row)
		}
		old[unquote(row[0])] = httperr.Code(unquote(row[2]))
	}
	if len(codes) == 0 || len(old) == 0 {
		return d, fmt.Errorf("%s: no table under \"## Codes\" or \"## Codes before\"", path)
	}
	d.codes, d.old = codes, old
	return d, nil
})

// docsPath finds docs/http-errors.md in the module's root, above the
// test's directory.
func docsPath() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return filepath.Join(dir, "docs", "http-errors.md"), nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", fmt.Errorf("no go.mod above the test's directory")
		}
		dir = parent
	}
}

var separator = regexp.MustCompile(`^\|[ -|]+\|$`)

// tableRows returns the cells of the body rows of the first table after
// the line heading, without its header row.
func tableRows(doc []byte, heading string) [][]string {
	var rows [][]string
	in, seen := false, 0
	for line := range bytes.Lines(doc) {
		l := strings.TrimSpace(string(line))
		switch {
		case !in:
			in = l == heading
		case strings.HasPrefix(l, "|"):
			seen++
			if seen <= 2 && (seen == 1 || separator.MatchString(l)) {
				continue // the header row and the separator
			}
			cells := strings.Split(strings.Trim(l, "|"), "|")
			for i := range cells {
				cells[i] = strings.TrimSpace(cells[i])
			}
			rows = append(rows, cells)
		case seen > 0:
			return rows
		case strings.HasPrefix(l, "#"):
			return rows
		}
	}
	return rows
}

func unquote(cell string) string { return strings.Trim(cell, "`") }

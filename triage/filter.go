package triage

import (
	"html/template"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/extractq/extractq/pipeline"
	"github.com/extractq/extractq/store"
)

// Filter is the queue filter as pages and the API take it in a query
// string: status, schema, kind, path, batch, age and sort.
type Filter struct {
	// Status is open (default), mine (open and claimed by me), approved,
	// rejected, rerun or any.
	Status string
	Schema string
	Kind   string // an error kind, such as rule
	Path   string // a JSON Pointer, or a pattern such as /items/*/sku
	Batch  string
	// Age is "" (any), "1h", "24h", "7d" (created within) or ">1h", ">24h",
	// ">7d" (older than).
	Age string
	// Sort is "" (oldest first) or "newest".
	Sort string
}

// Statuses, kinds and ages the filter form offers.
var (
	filterStatuses = []string{"open", "mine", "approved", "rejected", "rerun", "any"}
	filterAges     = []struct{ Value, Label string }{
		{"", "any age"}, {"1h", "last hour"}, {"24h", "last 24 h"}, {"7d", "last 7 days"},
		{">1h", "older than 1 h"}, {">24h", "older than 24 h"}, {">7d", "older than 7 days"},
	}
	filterKinds = []string{
		string(pipeline.KindParse), string(pipeline.KindSchema), string(pipeline.KindRule), string(pipeline.KindTool),
		string(pipeline.KindTruncated), string(pipeline.KindRefusal), string(pipeline.KindPatchInvalid),
		string(pipeline.KindBudget), string(pipeline.KindInput), string(pipeline.KindTransport), string(pipeline.KindDelivery),
	}
)

// parseFilter reads a filter from query values, refusing values the queue
// cannot mean.
func parseFilter(q url.Values) (Filter, error) {
	f := Filter{
		Status: strings.TrimSpace(q.Get("status")),
		Schema: strings.TrimSpace(q.Get("schema")),
		Kind:   strings.TrimSpace(q.Get("kind")),
		Path:   strings.TrimSpace(q.Get("path")),
		Batch:  strings.TrimSpace(q.Get("batch")),
		Age:    strings.TrimSpace(q.Get("age")),
		Sort:   strings.TrimSpace(q.Get("sort")),
	}
	if f.Status == "open" {
		f.Status = ""
	}
	if f.Status != "" && !contains(filterStatuses, f.Status) {
		return f, invalidf("status %q: want one of %s", f.Status, strings.Join(filterStatuses, ", "))
	}
	if f.Path != "" && !strings.HasPrefix(f.Path, "/") {
		return f, invalidf("path %q: want a JSON Pointer such as /order_id", f.Path)
	}
	if _, ok := ageBounds(f.Age); !ok {
		return f, invalidf("age %q: want 1h, 24h, 7d, >1h, >24h or >7d", f.Age)
	}
	if f.Sort != "" && f.Sort != "newest" {
		return f, invalidf("sort %q: want newest or nothing", f.Sort)
	}
	for _, v := range []string{f.Schema, f.Kind, f.Path, f.Batch} {
		if len(v) > 500 {
			return f, invalidf("filter value longer than 500 bytes")
		}
	}
	return f, nil
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// ageBounds returns the duration of an age and whether it is "older
// than" (negative) or "within" (positive); ok is false for an unknown age.
func ageBounds(age string) (time.Duration, bool) {
	older := strings.HasPrefix(age, ">")
	var d time.Duration
	switch strings.TrimPrefix(age, ">") {
	case "":
		if older {
			return 0, false
		}
		return 0, true
	case "1h":
		d = time.Hour
	case "24h":
		d = 24 * time.Hour
	case "7d":
		d = 7 * 24 * time.Hour
	default:
		return 0, false
	}
	if older {
		return -d, true
	}
	return d, true
}

// Store returns the store filter for reviewer me at time now.
func (f Filter) Store(me string, now time.Time) store.TriageFilter {
	sf := store.TriageFilter{Status: f.Status, SchemaID: f.Schema, Kind: f.Kind, Path: f.Path, BatchID: f.Batch}
	if f.Status == "mine" {
		sf.Status, sf.ClaimedBy = store.TriageOpen, me
	}
	if d, _ := ageBounds(f.Age); d > 0 {
		sf.NewerThan = now.Add(-d)
	} else if d < 0 {
		sf.OlderThan = now.Add(d)
	}
	return sf
}

// Values returns the filter as query values, leaving out empty ones.
func (f Filter) Values() url.Values {
	q := url.Values{}
	for k, v := range map[string]string{"status": f.Status, "schema": f.Schema, "kind": f.Kind, "path": f.Path,
		"batch": f.Batch, "age": f.Age, "sort": f.Sort} {
		if v != "" {
			q.Set(k, v)
		}
	}
	return q
}

// Query returns the filter as an encoded query string, "" for none.
func (f Filter) Query() string { return f.Values().Encode() }

// Q returns Query for templates: an encoded query string (url.Values
// escapes every value), marked so html/template keeps its '=' and '&'.
func (f Filter) Q() template.URL { return template.URL(f.Query()) }

// With returns, for templates, the filter's query string with key set to
// value (empty removes it), for the facet links.
func (f Filter) With(key, value string) template.URL {
	q := f.Values()
	if value == "" {
		q.Del(key)
	} else {
		q.Set(key, value)
	}
	return template.URL(q.Encode())
}

// IsZero reports whether the filter selects every open item.
func (f Filter) IsZero() bool { return f == Filter{} }

// pageNumber reads the page query value (from 1).
func pageNumber(q url.Values) int {
	n, err := strconv.Atoi(q.Get("page"))
	if err != nil || n < 1 {
		return 1
	}
	return min(n, 10000)
}

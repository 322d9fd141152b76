package triage

import (
	"context"
	"fmt"
	"html/template"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/extractq/extractq/extracttype"
	"github.com/extractq/extractq/store"
)

// Filter is the queue filter as pages and the API take it in a query
// string: status, schema, kind, path, batch, age, sort, search and
// cohort (prompt_version, schema_version, model).
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
	// Sort is "" (oldest first) or "newest"; the query value "oldest"
	// reads as "".
	Sort string
	// Search (query parameter q) keeps items whose message text matches
	// a web-search-style query (store.TriageFilter.Search); customer
	// text, so only roles that read it may search.
	Search string
	// PromptVersion, SchemaVersion and Model keep one cohort: the items
	// whose run's last LLM call had them (store.TriageFilter). Only
	// values some triage item's run has are taken (checkCohort).
	PromptVersion string
	SchemaVersion string
	Model         string
}

// Statuses, kinds and ages the filter form offers, and the only ones
// parseFilter accepts.
var (
	filterStatuses = []string{store.TriageOpen, "mine", store.TriageApproved, store.TriageRejected, store.TriageRerun,
		store.TriageAnyStatus}
	filterAges = []struct{ Value, Label string }{
		{"", "any age"}, {"1h", "last hour"}, {"24h", "last 24 h"}, {"7d", "last 7 days"},
		{">1h", "older than 1 h"}, {">24h", "older than 24 h"}, {">7d", "older than 7 days"},
	}
	filterKinds = []string{
		string(extracttype.KindParse), string(extracttype.KindSchema), string(extracttype.KindRule), string(extracttype.KindTool),
		string(extracttype.KindTruncated), string(extracttype.KindRefusal), string(extracttype.KindPatchInvalid),
		string(extracttype.KindBudget), string(extracttype.KindInput), string(extracttype.KindTransport), string(extracttype.KindDelivery),
		string(extracttype.KindHeld),
	}
)

// filterParams are the query parameters of the queue filter, in the
// order errors list them.
var filterParams = []string{"status", "schema", "kind", "path", "batch", "age", "sort", "q",
	"prompt_version", "schema_version", "model"}

// maxFilterValue bounds a filter value, in bytes.
const maxFilterValue = 500

// parseFilter reads a filter from query values, refusing values the queue
// cannot mean: a status, kind, age or sort it does not know, a schema not
// in schemas (the configured ids), a path that is not a JSON Pointer, a
// value longer than 500 bytes or one that is not text (whyNotText: the
// routes that take a link through checkParams or linkQuery never pass
// one, but the queue's live part, claim-next and the item pages read the
// filter as it comes). The error wraps ErrInvalid and names each
// such parameter and the values allowed ("; " between them). Parameters
// other than the filter's are not looked at.
func parseFilter(q url.Values, schemas []string) (Filter, error) {
	f, problems := readFilter(q, schemas)
	if len(problems) > 0 {
		return f, invalidf("%s", strings.Join(problems, "; "))
	}
	return f, nil
}

// readFilter reads a filter from query values as parseFilter does, but
// leaves out each value parseFilter would refuse and returns, for each, a
// line naming the parameter, the value and the values allowed. The queue
// page uses it so that a stale link still shows the queue.
func readFilter(q url.Values, schemas []string) (Filter, []string) {
	var problems []string
	// get returns the trimmed value of key if check (nil: any value)
	// passes, else "" and the problem noted.
	get := func(key string, check func(v string) string) string {
		v := strings.TrimSpace(q.Get(key))
		if v == "" {
			return ""
		}
		if len(v) > maxFilterValue {
			problems = append(problems, fmt.Sprintf("%s: value longer than %d bytes", key, maxFilterValue))
			return ""
		}
		if msg := textProblem(key, v); msg != "" {
			problems = append(problems, msg)
			return ""
		}
		if check != nil {
			if msg := check(v); msg != "" {
				problems = append(problems, msg)
				return ""
			}
		}
		return v
	}
	f := Filter{
		Status: get("status", func(v string) string {
			if !contains(filterStatuses, v) {
				return fmt.Sprintf("status %s: want one of %s", quoteValue(v), strings.Join(filterStatuses, ", "))
			}
			return ""
		}),
		Schema: get("schema", func(v string) string {
			if !contains(schemas, v) {
				return fmt.Sprintf("schema %s is not configured here: want one of %s", quoteValue(v), strings.Join(schemas, ", "))
			}
			return ""
		}),
		Kind: get("kind", func(v string) string {
			if !contains(filterKinds, v) {
				return fmt.Sprintf("kind %s: want one of %s", quoteValue(v), strings.Join(filterKinds, ", "))
			}
			return ""
		}),
		Path: get("path", func(v string) string {
			if !strings.HasPrefix(v, "/") {
				return fmt.Sprintf("path %s: want a JSON Pointer such as /order_id", quoteValue(v))
			}
			return ""
		}),
		Batch: get("batch", nil),
		Age: get("age", func(v string) string {
			if _, ok := ageBounds(v); !ok {
				return fmt.Sprintf("age %s: want 1h, 24h, 7d, >1h, >24h or >7d", quoteValue(v))
			}
			return ""
		}),
		Sort: get("sort", func(v string) string {
			if v != "newest" && v != "oldest" {
				return fmt.Sprintf("sort %s: want newest or oldest (the default)", quoteValue(v))
			}
			return ""
		}),
		Search:        get("q", nil),
		PromptVersion: get("prompt_version", nil),
		SchemaVersion: get("schema_version", nil),
		Model:         get("model", nil),
	}
	if f.Status == store.TriageOpen {
		f.Status = ""
	}
	if f.Sort == "oldest" {
		f.Sort = ""
	}
	return f, problems
}

// quoteValue quotes a query value for an error message, cut to 80
// characters.
func quoteValue(v string) string {
	if r := []rune(v); len(r) > 80 {
		v = string(r[:80]) + "…"
	}
	return strconv.Quote(v)
}

// parseFilter reads the query's filter against the server's schemas
// and the cohorts of the triage items (checkCohort).
func (s *Server) parseFilter(ctx context.Context, q url.Values) (Filter, error) {
	f, err := parseFilter(q, s.schemaIDs())
	if err != nil {
		return f, err
	}
	problems, err := s.checkCohort(ctx, &f)
	if err != nil {
		return f, err
	}
	if len(problems) > 0 {
		return f, invalidf("%s", strings.Join(problems, "; "))
	}
	return f, nil
}

// readFilter reads the query's filter as readFilter does, leaving out
// cohort values no triage item's run has (checkCohort) too.
func (s *Server) readFilter(ctx context.Context, q url.Values) (Filter, []string, error) {
	f, problems := readFilter(q, s.schemaIDs())
	more, err := s.checkCohort(ctx, &f)
	return f, append(problems, more...), err
}

// checkCohort clears each cohort value of f (prompt_version,
// schema_version, model) that the run of no triage item has
// (store.TriageCohortValues) and returns, for each, a line naming the
// parameter, the value and the values allowed. It reads the store only
// when f has a cohort value.
func (s *Server) checkCohort(ctx context.Context, f *Filter) ([]string, error) {
	if f.PromptVersion == "" && f.SchemaVersion == "" && f.Model == "" {
		return nil, nil
	}
	known, err := s.st.TriageCohortValues(ctx, s.st.Pool)
	if err != nil {
		return nil, err
	}
	var problems []string
	for _, c := range []struct {
		key   string
		v     *string
		known []string
	}{
		{"prompt_version", &f.PromptVersion, known.PromptVersions},
		{"schema_version", &f.SchemaVersion, known.SchemaVersions},
		{"model", &f.Model, known.Models},
	} {
		if *c.v == "" || contains(c.known, *c.v) {
			continue
		}
		want := "no triage item has a run with one yet"
		if len(c.known) > 0 {
			want = "want one of " + strings.Join(c.known, ", ")
		}
		problems = append(problems, fmt.Sprintf("%s %s: no triage item's run has it; %s", c.key, quoteValue(*c.v), want))
		*c.v = ""
	}
	return problems, nil
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
	sf := store.TriageFilter{Status: f.Status, SchemaID: f.Schema, Kind: f.Kind, Path: f.Path, BatchID: f.Batch, Search: f.Search,
		PromptVersion: f.PromptVersion, SchemaVersion: f.SchemaVersion, Model: f.Model}
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
		"batch": f.Batch, "age": f.Age, "sort": f.Sort, "q": f.Search,
		"prompt_version": f.PromptVersion, "schema_version": f.SchemaVersion, "model": f.Model} {
		if v != "" {
			q.Set(k, v)
		}
	}
	return q
}

// String returns the filter for messages: each value set, in the order
// of filterParams, as key "value" ("status \"open\"" for none).
func (f Filter) String() string {
	var parts []string
	for i, v := range []string{f.Status, f.Schema, f.Kind, f.Path, f.Batch, f.Age, f.Sort, f.Search,
		f.PromptVersion, f.SchemaVersion, f.Model} {
		if v != "" {
			parts = append(parts, filterParams[i]+" "+quoteValue(v))
		}
	}
	if len(parts) == 0 {
		return `status "open"`
	}
	return strings.Join(parts, ", ")
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

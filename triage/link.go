package triage

import (
	"fmt"
	"net/http"
	"net/url"
	"sort"
	"strings"
	"unicode/utf8"
)

// How a route reads the parameters of its link.
//
// The JSON API and the pages that act on a link (bulk re-run, the queue's
// live part) are strict: a parameter they do not take, or a value they
// cannot mean, is a 400 (checkParams, parseFilter, parseReportQuery,
// parseAuditQuery). The pages people reach from bookmarks and pasted
// links (the queue, the reports, the audit log) are lenient: they leave
// out what they cannot mean, show the rest, and say at the top what was
// left out (linkNotice and the partial link_notice). Both read a link with
// the same readers (readFilter, readReportQuery, readAuditQuery), so a
// page's notice and the API's 400 name the same problems.
//
// A value that is not text (bytes that are not UTF-8, or a NUL byte) is
// one no route can mean, whatever the parameter: Postgres text cannot
// hold it, so the store could not look it up. It is checked here, for
// every parameter a route takes, before any reader: checkParams refuses
// it, and a lenient page reads its link through linkQuery, which leaves
// it out, while linkNotice names it. The API's path values ({id} in
// /api/v1/batches/{id}) are checked the same way (checkPathValues).

// paramProblems reads r's query string against params: the parameters
// not in params and those given more than once, each quoted and sorted;
// a line for each value of a parameter in params that is not text
// (textProblem), in the order of params; and the error of a query string
// that does not parse (r.URL.Query keeps the pairs that do).
func paramProblems(r *http.Request, params []string) (unknown, repeated, notText []string, err error) {
	q, err := url.ParseQuery(r.URL.RawQuery)
	for k, vs := range q {
		switch {
		case !contains(params, k):
			unknown = append(unknown, quoteValue(k))
		case len(vs) > 1:
			repeated = append(repeated, quoteValue(k))
		}
	}
	sort.Strings(unknown)
	sort.Strings(repeated)
	for _, k := range params {
		for _, v := range q[k] {
			if line := textProblem(k, v); line != "" {
				notText = append(notText, line)
			}
		}
	}
	return unknown, repeated, notText, err
}

// whyNotText says why v is not text that Postgres can hold: "the value
// is not UTF-8 text" or "the value holds a NUL byte"; "" when it is. (The
// store cleans such text before it writes it, store.CleanText, but a
// value a route looks up is refused instead: cleaned, it would look up
// something else.)
func whyNotText(v string) string {
	switch {
	case !utf8.ValidString(v):
		return "the value is not UTF-8 text"
	case strings.IndexByte(v, 0) >= 0:
		return "the value holds a NUL byte"
	}
	return ""
}

// textProblem returns the line naming parameter key and its value v when
// v is not text (whyNotText), as `batch "\xff": the value is not UTF-8
// text`; "" when it is.
func textProblem(key, v string) string {
	why := whyNotText(v)
	if why == "" {
		return ""
	}
	return fmt.Sprintf("%s %s: %s", key, quoteValue(v), why)
}

// linkQuery returns r's query values without those that are not text
// (whyNotText): what a lenient page reads, linkNotice naming what it left
// out.
func linkQuery(r *http.Request) url.Values {
	q := r.URL.Query()
	for k, vs := range q {
		kept := vs[:0]
		for _, v := range vs {
			if whyNotText(v) == "" {
				kept = append(kept, v)
			}
		}
		if len(kept) == 0 {
			delete(q, k)
		} else {
			q[k] = kept
		}
	}
	return q
}

// checkPathValues refuses, with an error wrapping ErrInvalid, a path
// value of r's route (the {id} of GET /api/v1/batches/{id}) that is not
// text (whyNotText), naming it.
func checkPathValues(r *http.Request) error {
	pattern := r.Pattern // [METHOD ][HOST]/PATH
	if i := strings.IndexByte(pattern, '/'); i >= 0 {
		pattern = pattern[i:]
	}
	for _, seg := range strings.Split(pattern, "/") {
		if len(seg) < 2 || seg[0] != '{' || seg[len(seg)-1] != '}' {
			continue
		}
		name := strings.TrimSuffix(seg[1:len(seg)-1], "...")
		if name == "$" {
			continue
		}
		if line := textProblem(name, r.PathValue(name)); line != "" {
			return invalidf("path value %s", line)
		}
	}
	return nil
}

// linkNotice returns the lines of the notice a lenient page shows above
// itself: problems (the values the page's reader left out), then a line
// for the parameters of r the page does not take, naming the ones it
// takes (params), one for parameters given more than once (the page reads
// the first value), and one for a query string that does not fully
// parse. Right after problems come the values that are not text, which
// the page read without (linkQuery). page names the page in those lines,
// as in "the queue". None means the page shows the link as it is.
func linkNotice(r *http.Request, page string, params, problems []string) []string {
	unknown, repeated, notText, err := paramProblems(r, params)
	out := append(append([]string(nil), problems...), notText...)
	if len(unknown) > 0 {
		noun := "parameter"
		if len(unknown) > 1 {
			noun = "parameters"
		}
		out = append(out, fmt.Sprintf("unknown %s %s: %s takes %s", noun, strings.Join(unknown, ", "), page, strings.Join(params, ", ")))
	}
	if len(repeated) > 0 {
		out = append(out, fmt.Sprintf("%s given more than once: %s reads the first value only", strings.Join(repeated, ", "), page))
	}
	if err != nil {
		out = append(out, fmt.Sprintf("part of the query string does not parse (%v)", err))
	}
	return out
}

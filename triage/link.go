package triage

import (
	"fmt"
	"net/http"
	"net/url"
	"sort"
	"strings"
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

// paramProblems reads r's query string against params: the parameters
// not in params and those given more than once, each quoted and sorted,
// and the error of a query string that does not parse (r.URL.Query keeps
// the pairs that do).
func paramProblems(r *http.Request, params []string) (unknown, repeated []string, err error) {
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
	return unknown, repeated, err
}

// linkNotice returns the lines of the notice a lenient page shows above
// itself: problems (the values the page's reader left out), then a line
// for the parameters of r the page does not take, naming the ones it
// takes (params), one for parameters given more than once (the page reads
// the first value), and one for a query string that does not fully
// parse. page names the page in those lines, as in "the queue". None
// means the page shows the link as it is.
func linkNotice(r *http.Request, page string, params, problems []string) []string {
	out := append([]string(nil), problems...)
	unknown, repeated, err := paramProblems(r, params)
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

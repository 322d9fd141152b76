package store

import "fmt"

// Text search over the triage queue: TriageFilter.Search keeps the items
// whose message text matches a query in the shape of a web search box
// (websearch_to_tsquery: words all present, "a quoted phrase", or, -word
// absent), read with the 'simple' configuration (lower-cased words, no
// stemming, no stop words: any language alike; a text without spaces
// between words, such as Chinese or Japanese, is one word per run of
// letters). The index is migration 000019's, over the first
// MaxSearchedChars characters of messages.body; an erasure blanks the
// body, so an erased message is never found.

// MaxSearchedChars is how many characters of a message's text the search
// index holds: a tsvector holds at most 1 MB, and a longer text must not
// fail its ingest.
const MaxSearchedChars = 100000

// triageSearchSQL matches the message m against the query $n; it is
// migration 000019's index expression, word for word, so the planner
// uses the index.
const triageSearchSQL = `to_tsvector('simple'::regconfig, left(m.body, 100000)) @@ websearch_to_tsquery('simple'::regconfig, %s)`

// searchCond returns the search's condition on m, adding its argument to
// a; "" without a search.
func (f TriageFilter) searchCond(a *sqlArgs) string {
	if f.Search == "" {
		return ""
	}
	return fmt.Sprintf(triageSearchSQL, a.add(f.Search))
}

package triage

import (
	"fmt"
	"net/http"
)

// Text search over the queue (docs/triage.md, "Search"): the filter's
// Search, query parameter q, on the queue page, its live part, claim
// next, the item pages' neighbours, the API's items, counts and bulk
// re-run routes, combined with the other filters (store.TriageFilter).
//
// A search reads customer text: whether a message holds a word is that
// text. So a role that reads no customer text (analyst) may not search,
// even on a route it may otherwise use (the counts); the search query
// itself is kept out of logs and of the audit log, since it is as much
// customer text as what it finds.

// authorizeSearch refuses a search in f by a role that may not read
// customer text, as authorize does (403 forbidden, audited without the
// query), and returns nil without a search.
func (s *Server) authorizeSearch(r *http.Request, f Filter) error {
	if f.Search == "" {
		return nil
	}
	if err := s.authorize(r, reviewers); err != nil {
		return fmt.Errorf("%w (a search, q, reads the messages' text)", err)
	}
	return nil
}

package triage_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/extractq/extractq/store"
)

// TestSearch: the queue page and the API search the messages' text (q),
// with the other filters; an analyst, who reads no customer text, may
// not search the counts it may otherwise read, and the refusal is
// audited without the query.
func TestSearch(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b, c := newAliceBundle(t)
	albert, _ := b.failedItem(t, "customer_message", albertText, albertFirst, albertRepair)
	hostile, _ := b.failedItem(t, "customer_message", hostileText, hostileReply)
	rr, _ := b.failedItem(t, "return_request", rrText, rrReply)

	// The page: the search box keeps the query, the list has the item.
	r := c.get("/?q=" + url.QueryEscape("Albert Sanders"))
	if r.status != http.StatusOK || !strings.Contains(r.body, fmt.Sprintf(`href="/items/%d?q=Albert&#43;Sanders"`, albert)) ||
		strings.Contains(r.body, fmt.Sprintf(`href="/items/%d`, hostile)) || !strings.Contains(r.body, `name="q" id="search" value="Albert Sanders"`) {
		t.Errorf("queue page searching for Albert Sanders: %d, want item %d only, the query in the box", r.status, albert)
	}
	// Combined with a filter: the word is in both schemas' messages.
	r = c.get("/queue/live?schema=return_request&q=refund")
	if r.status != http.StatusOK || !strings.Contains(r.body, fmt.Sprintf(`href="/items/%d?`, rr)) || strings.Contains(r.body, fmt.Sprintf(`href="/items/%d?`, albert)) {
		t.Errorf("live part, return_request and refund: %d, want item %d only", r.status, rr)
	}

	// The API: items and counts, as a reviewer's token.
	tok := newRoleToken(t, b, "rita", "reviewer", "")
	r = b.api(t, tok, "GET", "/api/v1/items?q="+url.QueryEscape(`"Dana Cruz"`), "")
	var list struct {
		Total int `json:"total"`
		Items []struct {
			ID int64 `json:"id"`
		} `json:"items"`
	}
	if err := json.Unmarshal([]byte(r.body), &list); err != nil || r.status != http.StatusOK || list.Total != 1 || len(list.Items) != 1 || list.Items[0].ID != hostile {
		t.Errorf("API search for a phrase: %d %s, want item %d", r.status, r.body, hostile)
	}
	r = b.api(t, tok, "GET", "/api/v1/items/counts?q=nosuchword", "")
	if r.status != http.StatusOK || !strings.Contains(r.body, `"total":0`) {
		t.Errorf("API counts of a word in no message: %d %s", r.status, r.body)
	}

	// An analyst reads the counts, but not through a search.
	ana := newRoleToken(t, b, "ann", "analyst", "")
	if r := b.api(t, ana, "GET", "/api/v1/items/counts", ""); r.status != http.StatusOK {
		t.Errorf("analyst counts: %d %s", r.status, r.body)
	}
	r = b.api(t, ana, "GET", "/api/v1/items/counts?q=Albert", "")
	if r.status != http.StatusForbidden || !strings.Contains(r.body, `"forbidden"`) || !strings.Contains(r.body, "q") {
		t.Errorf("analyst searching the counts: %d %s, want 403 forbidden", r.status, r.body)
	}
	entries, err := b.st.AuditList(ctx, b.st.Pool, store.AuditListParams{Actor: "ann"})
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) == 0 || entries[0].Action != store.AuditForbidden {
		t.Fatalf("audit of the analyst's search: %+v", entries)
	}
	if raw, _ := json.Marshal(entries[0]); strings.Contains(string(raw), "Albert") {
		t.Errorf("the audit entry holds the search query: %s", raw)
	}
}

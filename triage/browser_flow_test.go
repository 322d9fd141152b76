package triage_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/chromedp/chromedp/kb"
)

// TestBrowserFlow drives the reviewer's flow of issue 16 in chromium,
// one part after another in one browser: the queue's text search,
// multi-select for bulk decisions, and select-to-fill on the item page.
func TestBrowserFlow(t *testing.T) {
	b := newBundle(t, bundleOpts{})
	chromiumPath(t)
	t.Parallel()
	b.reviewer(t, "alice", "correct horse battery")
	albert, _ := b.failedItem(t, "customer_message", albertText, albertFirst, albertRepair)
	hostile, _ := b.failedItem(t, "customer_message", browserHostile, browserHostileReply)
	rr, _ := b.failedItem(t, "return_request", rrText, rrReply)
	g := newBrowserRig(t, b, 4*time.Minute)
	alice := g.tab(t)
	g.login(t, alice, "alice", "correct horse battery")

	t.Run("Search", func(t *testing.T) {
		// "/" goes to the search box; the query and Enter list the
		// items whose message has the words, the others not.
		g.step(t, alice, "search with /",
			chromedp.KeyEvent("/"),
			poll(`document.activeElement && document.activeElement.id === 'search'`),
			chromedp.SendKeys(chromedp.ID("search"), "refund Domingo"+kb.Enter),
			chromedp.WaitVisible(chromedp.CSS(fmt.Sprintf(`tr[data-href^="/items/%d?"]`, rr))),
		)
		var got struct {
			Rows  int    `json:"rows"`
			Query string `json:"query"`
			Href  string `json:"href"`
		}
		g.eval(t, alice, `({rows: document.querySelectorAll('#items tbody tr.row').length,
			query: document.querySelector('#search').value,
			href: document.querySelector('#items tbody tr.row').dataset.href})`, &got)
		if got.Rows != 1 || got.Query != "refund Domingo" || got.Href != fmt.Sprintf("/items/%d?q=refund+Domingo", rr) {
			t.Errorf("after searching: %+v, want item %d alone, its link keeping the search", got, rr)
		}
		// The item found opens with the search kept for j/k.
		g.step(t, alice, "open the item found", chromedp.KeyEvent("j"), chromedp.KeyEvent(kb.Enter), chromedp.WaitVisible(chromedp.ID("msgtext")))
		g.step(t, alice, "back to the whole queue", chromedp.Navigate(g.web.URL+"/"), chromedp.WaitVisible(chromedp.ID("items")))
		var rows int
		g.eval(t, alice, `document.querySelectorAll('#items tbody tr.row').length`, &rows)
		if rows != 3 {
			t.Errorf("whole queue: %d rows, want 3 (items %d, %d, %d)", rows, albert, hostile, rr)
		}
	})
}

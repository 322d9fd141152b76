package triage_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/chromedp/chromedp/kb"

	"github.com/extractq/extractq/store"
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
	staleA := b.staleItem(t, albertText, albertFixed)
	staleB := b.staleItem(t, albertText, albertFixed)
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
		if rows != 5 {
			t.Errorf("whole queue: %d rows, want 5 (items %d, %d, %d, %d, %d)", rows, albert, hostile, rr, staleA, staleB)
		}
	})

	t.Run("MultiSelect", func(t *testing.T) {
		// Tick one item by its checkbox's cell, another with j… and x;
		// a new item arriving (the live list is replaced) keeps both
		// ticked; one POST approves those whose record validates.
		rowOf := func(id int64) string { return fmt.Sprintf(`tr[data-href^="/items/%d"]`, id) }
		g.step(t, alice, "tick by the cell", chromedp.Click(chromedp.CSS(rowOf(staleA)+` td.pick`)),
			poll(`document.querySelector('#picked').textContent === '1 selected'`))
		g.step(t, alice, "tick with x", chromedp.KeyEvent("j"), chromedp.KeyEvent("j"), chromedp.KeyEvent("j"),
			chromedp.KeyEvent("j"), chromedp.KeyEvent("j"), chromedp.KeyEvent("x"),
			poll(`document.querySelector('#picked').textContent === '2 selected'`))
		b.failedItem(t, "customer_message", "my order 4967029823 never came\nAlessandro Phoenix", "{}")
		g.step(t, alice, "the new item arrives", poll(`document.querySelectorAll('#items tbody tr.row').length === 6`))
		var ticked []string
		g.eval(t, alice, `Array.from(document.querySelectorAll('input[name=id]:checked')).map(b => b.value)`, &ticked)
		if want := []string{fmt.Sprint(staleA), fmt.Sprint(staleB)}; fmt.Sprint(ticked) != fmt.Sprint(want) {
			t.Errorf("ticked after the live refresh = %v, want %v", ticked, want)
		}
		g.step(t, alice, "approve the valid ones", chromedp.Click(chromedp.ID("bulk-approve")), chromedp.WaitVisible(chromedp.ID("bulk-report")))
		var report []string
		g.eval(t, alice, `Array.from(document.querySelectorAll('#bulk-report tbody tr')).map(r => r.cells[0].textContent + ' ' + r.cells[1].textContent)`, &report)
		if want := []string{fmt.Sprintf("#%d approved", staleA), fmt.Sprintf("#%d approved", staleB)}; fmt.Sprint(report) != fmt.Sprint(want) {
			t.Errorf("bulk report = %q, want %q", report, want)
		}
		for _, id := range []int64{staleA, staleB} {
			if d, _ := b.st.TriageItemGet(context.Background(), b.st.Pool, id); d.Item.Status != store.TriageApproved || d.Item.DecidedBy != "alice" {
				t.Errorf("item %d after the bulk approve: %s by %q", id, d.Item.Status, d.Item.DecidedBy)
			}
		}
		// Select all on the page, then reject them with one reason.
		g.step(t, alice, "select all with *", chromedp.KeyEvent("*"), poll(`document.querySelector('#picked').textContent === '4 selected'`))
		g.step(t, alice, "none again", chromedp.Click(chromedp.ID("pick-all")), poll(`document.querySelector('#picked').textContent === 'none selected'`))
	})
}

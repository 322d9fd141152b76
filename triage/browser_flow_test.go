package triage_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/input"
	"github.com/chromedp/chromedp"
	"github.com/chromedp/chromedp/kb"

	"github.com/extractq/extractq/extracttype"
	"github.com/extractq/extractq/store"
)

// TestBrowserFlow drives the reviewer's flow of issue 16 in chromium,
// one part after another in one browser: the queue's text search,
// multi-select for bulk decisions, select-to-fill on the item page, and
// the item page live across two replicas.
func TestBrowserFlow(t *testing.T) {
	b := newBundle(t, bundleOpts{live: true})
	chromiumPath(t)
	t.Parallel()
	b.reviewer(t, "alice", "correct horse battery")
	albert, _ := b.failedItem(t, "customer_message", albertText, albertFirst, albertRepair)
	hostile, _ := b.failedItem(t, "customer_message", browserHostile, browserHostileReply)
	rr, _ := b.failedItem(t, "return_request", rrText, rrReply)
	staleA := b.staleItem(t, albertText, albertFixed)
	staleB := b.staleItem(t, albertText, albertFixed)
	// The name twice, emoji (outside the BMP: two UTF-16 units each)
	// and a CR LF before the second.
	emojiText := "🎉🎉 From: Albert Sanders\r\n" + albertText
	emojiItem, emojiMsg := b.failedItem(t, "customer_message", emojiText, albertFirst, albertNoName)
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
		if rows != 6 {
			t.Errorf("whole queue: %d rows, want 6 (items %d, %d, %d, %d, %d, %d)", rows, albert, hostile, rr, staleA, staleB, emojiItem)
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
		g.step(t, alice, "the new item arrives", poll(`document.querySelectorAll('#items tbody tr.row').length === 7`))
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
		g.step(t, alice, "select all with *", chromedp.KeyEvent("*"), poll(`document.querySelector('#picked').textContent === '5 selected'`))
		g.step(t, alice, "none again", chromedp.Click(chromedp.ID("pick-all")), poll(`document.querySelector('#picked').textContent === 'none selected'`))
	})

	t.Run("SelectToFill", func(t *testing.T) {
		// The second "Albert Sanders" of the message, in code points.
		runes := []rune(emojiText)
		first := strings.Index(emojiText, "Albert Sanders")
		second := first + 1 + strings.Index(emojiText[first+1:], "Albert Sanders")
		start := len([]rune(emojiText[:second]))
		end := start + len([]rune("Albert Sanders"))
		if string(runes[start:end]) != "Albert Sanders" || start == len([]rune(emojiText[:first])) {
			t.Fatalf("bad fixture: %d-%d", start, end)
		}
		g.step(t, alice, "open the item", chromedp.Navigate(fmt.Sprintf("%s/items/%d", g.web.URL, emojiItem)),
			chromedp.WaitVisible(chromedp.ID("claim")), chromedp.KeyEvent("c"), chromedp.WaitVisible(chromedp.CSS(`#lease .badge.mine`)),
			poll(`document.querySelector('#check-status').textContent.trim() === '1 error'`))
		// e goes to the field with the error; one drag over the second
		// occurrence fills it.
		g.step(t, alice, "e", chromedp.KeyEvent("e"), poll(`document.activeElement && document.activeElement.id === 'f:/full_name'`))
		var box struct{ X1, Y1, X2, Y2 float64 }
		g.eval(t, alice, `(() => {
			const msg = document.querySelector('#msgtext');
			const walker = document.createTreeWalker(msg, NodeFilter.SHOW_TEXT);
			let seen = 0, n;
			while ((n = walker.nextNode())) {
				const i = n.data.indexOf('Albert Sanders');
				if (i < 0) continue;
				if (++seen < 2) continue;
				const r = document.createRange();
				r.setStart(n, i); r.setEnd(n, i + 'Albert Sanders'.length);
				const rs = r.getClientRects(), a = rs[0], z = rs[rs.length - 1];
				return {x1: a.left + 1, y1: (a.top + a.bottom) / 2, x2: z.right - 1, y2: (z.top + z.bottom) / 2};
			}
			return null;
		})()`, &box)
		held := func(p *input.DispatchMouseEventParams) { p.Buttons = 1 }
		g.step(t, alice, "drag over the name",
			chromedp.MouseEvent(chromedp.MousePressed, box.X1, box.Y1, chromedp.ButtonLeft, chromedp.ClickCount(1)),
			chromedp.MouseEvent(chromedp.MouseMoved, (box.X1+box.X2)/2, box.Y2, chromedp.ButtonLeft, held),
			chromedp.MouseEvent(chromedp.MouseMoved, box.X2, box.Y2, chromedp.ButtonLeft, held),
			chromedp.MouseEvent(chromedp.MouseReleased, box.X2, box.Y2, chromedp.ButtonLeft, chromedp.ClickCount(1)),
			poll(`document.querySelector('#check-status').textContent.trim() === 'valid'`))
		var filled struct {
			Value string `json:"value"`
			Span  string `json:"span"`
		}
		g.eval(t, alice, `({value: document.querySelector('[id="f:/full_name"]').value,
			span: (document.querySelector('input[name="s:/full_name"]') || {}).value || ''})`, &filled)
		if want := fmt.Sprintf("%d-%d", start, end); filled.Value != "Albert Sanders" || filled.Span != want {
			t.Errorf("after the drag: %+v, want Albert Sanders at %s (code points, past the emoji)", filled, want)
		}
		g.step(t, alice, "approve with a", chromedp.KeyEvent("a"), chromedp.WaitVisible(chromedp.ID("flash")))
		cur, err := b.st.CurrentResultGet(context.Background(), b.st.Pool, store.CurrentResultGetParams{MessageID: emojiMsg})
		if err != nil {
			t.Fatal(err)
		}
		var ev []extracttype.Evidence
		_ = json.Unmarshal(cur.Evidence, &ev)
		var got *extracttype.Evidence
		for i := range ev {
			if ev[i].Path == "/full_name" {
				got = &ev[i]
			}
		}
		if got == nil || got.Start != start || got.End != end || got.Normalized {
			t.Errorf("stored evidence of /full_name = %+v, want %d-%d, the span selected (evidence %s)", got, start, end, cur.Evidence)
		}
	})

	t.Run("LiveAcrossReplicas", func(t *testing.T) {
		// Alice reads an item on replica A; bob rejects it on replica B;
		// alice's page says so and stops its forms, without a reload.
		g.step(t, alice, "open the item", chromedp.Navigate(fmt.Sprintf("%s/items/%d", g.web.URL, hostile)),
			chromedp.WaitVisible(chromedp.ID("claim")), poll(`document.querySelector('#item').dataset.liveState === 'on'`))
		rb := b.replica(t)
		tok := newToken(t, b, "bob")
		req, _ := http.NewRequest(http.MethodPost, fmt.Sprintf("%s/api/v1/items/%d/reject", rb.URL, hostile), strings.NewReader(`{"reason":"spam"}`))
		req.Header.Set("Authorization", "Bearer "+tok)
		req.Header.Set("Content-Type", "application/json")
		resp, err := rb.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("bob's rejection on replica B: %d", resp.StatusCode)
		}
		g.step(t, alice, "the page learns it", chromedp.WaitVisible(chromedp.ID("live-decided")))
		var page struct {
			Text     string `json:"text"`
			Disabled bool   `json:"disabled"`
		}
		g.eval(t, alice, `({text: document.querySelector('#live-decided').textContent,
			disabled: Array.from(document.querySelectorAll('#item fieldset')).every(f => f.disabled)})`, &page)
		if !strings.Contains(page.Text, fmt.Sprintf("Item %d was rejected by bob", hostile)) || !page.Disabled {
			t.Errorf("alice's page after bob's rejection: %+v", page)
		}
	})
}

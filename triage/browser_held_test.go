package triage_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/extractq/extractq/store"
)

// In chromium: a held item is found by its kind in the queue, shows the
// rule that held it and its record, valid; claimed and approved with the
// keyboard, the held record becomes the message's result, made by the
// reviewer.
func TestBrowserHeldApprove(t *testing.T) {
	chromiumPath(t)
	t.Parallel()
	ctx := context.Background()
	b := newBundle(t, bundleOpts{})
	b.reviewer(t, "alice", "correct horse battery")
	heldID, heldMsg := b.heldItem(t, heldText, heldRecord)
	b.failedItem(t, "customer_message", albertText, albertFirst, albertRepair)

	web := httptest.NewServer(b.srv.Handler())
	defer web.Close()
	tab, cancelTab := chromedp.NewContext(sharedBrowser(t, 2*time.Minute), chromedp.WithNewBrowserContext())
	defer cancelTab()
	if err := chromedp.Do(tab); err != nil {
		t.Fatalf("opening a tab: %v", err)
	}
	step := func(name string, actions ...chromedp.Action[chromedp.Void]) {
		t.Helper()
		sctx, cancel := context.WithTimeout(tab, 20*time.Second)
		defer cancel()
		if err := chromedp.Do(sctx, actions...); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
	}
	eval := func(expr string, out any) {
		t.Helper()
		sctx, cancel := context.WithTimeout(tab, 20*time.Second)
		defer cancel()
		raw, err := chromedp.Run(sctx, chromedp.Evaluate[[]byte](expr, chromedp.EvalAwaitPromise))
		if err != nil {
			t.Fatalf("evaluate %s: %v", expr, err)
		}
		if err := json.Unmarshal(raw, out); err != nil {
			t.Fatalf("evaluate %s: %s: %v", expr, raw, err)
		}
	}

	step("log in",
		chromedp.Navigate(web.URL+"/"),
		chromedp.WaitVisible(chromedp.ID("login")),
		chromedp.SendKeys(chromedp.ID("login"), "alice"),
		chromedp.SendKeys(chromedp.ID("password"), "correct horse battery"),
		chromedp.Click(chromedp.ID("login-submit")),
		chromedp.WaitVisible(chromedp.ID("items")),
	)
	step("the queue of kind held", chromedp.Navigate(web.URL+"/?kind=held"), chromedp.WaitVisible(chromedp.ID("items")))
	var queue struct {
		Links []string `json:"links"`
		Kinds []string `json:"kinds"`
	}
	eval(`({links: [...document.querySelectorAll('#items a[href^="/items/"]')].map(a => a.getAttribute('href').split('?')[0]),
		kinds: [...document.querySelectorAll('#items .errcol .kind')].map(s => s.textContent)})`, &queue)
	want := fmt.Sprintf("/items/%d", heldID)
	if len(queue.Links) == 0 || queue.Links[0] != want || strings.Join(queue.Kinds, ",") != "held" {
		t.Fatalf("queue of kind held: links %q kinds %q, want only %s of kind held", queue.Links, queue.Kinds, want)
	}

	step("open the held item", chromedp.Navigate(web.URL+want), chromedp.WaitVisible(chromedp.ID("claim")))
	var page struct {
		HeldBy string `json:"heldBy"`
		Status string `json:"status"`
		Refund string `json:"refund"`
	}
	eval(`({heldBy: document.querySelector('#held-by').textContent.trim(),
		status: document.querySelector('#check-status').textContent.trim(),
		refund: document.querySelector('[id="f:/refund_amount"]').value})`, &page)
	if page.HeldBy != "refund_amount_review" || page.Status != "valid" || page.Refund != "900" {
		t.Fatalf("held item page: %+v, want held by refund_amount_review, valid, refund 900", page)
	}
	step("claim with c and approve with a",
		chromedp.KeyEvent("c"),
		chromedp.WaitVisible(chromedp.CSS(`#lease .badge.mine`)),
		chromedp.KeyEvent("a"),
		chromedp.WaitVisible(chromedp.ID("flash")),
	)
	var flash string
	eval(`document.querySelector('#flash').textContent`, &flash)
	if !strings.Contains(flash, fmt.Sprintf("Approved item %d", heldID)) {
		t.Errorf("flash after approve = %q", flash)
	}
	cur, err := b.st.CurrentResultGet(ctx, b.st.Pool, store.CurrentResultGetParams{MessageID: heldMsg})
	if err != nil || cur.Outcome != "approved" || cur.CreatedBy != "alice" || !strings.Contains(string(cur.Data), `"refund_amount": "900"`) {
		t.Fatalf("current result after approving the held item: %+v, %v", cur, err)
	}
	d, err := b.st.TriageItemGet(ctx, b.st.Pool, heldID)
	if err != nil || d.Item.Status != store.TriageApproved || d.Item.DecidedBy != "alice" {
		t.Errorf("held item after approve: %+v, %v", d.Item, err)
	}
}

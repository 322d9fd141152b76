package triage_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/chromedp/chromedp/kb"

	"github.com/extractq/extractq/store"
)

// checksDone counts, in the page, the checks app.js sent and the ones
// whose reply it has handled: a check's .then callbacks (showErrors) run
// as microtasks once its JSON is read, before the timer this wrapper
// sets, so done == started means every reply was shown or dropped.
const checksDone = `(() => {
	const f = window.fetch;
	window.__checks = {started: 0, done: 0};
	window.fetch = function (url, init) {
		const check = String(url).endsWith('/check');
		if (check) window.__checks.started++;
		return f.apply(this, arguments).then(r => {
			if (!check) return r;
			const json = r.json.bind(r);
			r.json = () => json().finally(() => setTimeout(() => window.__checks.done++, 0));
			return r;
		});
	};
	return true;
})()`

// TestBrowserCheckOutOfOrder: the item page checks the form as the
// reviewer types; a slow check answered after a newer one must not
// replace the newer one's errors and digest, or Approve sends the digest
// of an older record and is refused ("the record changed after it was
// last checked"). The server holds the first check until the page has
// shown the second's answer.
func TestBrowserCheckOutOfOrder(t *testing.T) {
	b := newBundle(t, bundleOpts{})
	chromiumPath(t)
	t.Parallel()
	b.reviewer(t, "alice", "correct horse battery")
	if err := b.st.BatchInsert(context.Background(), b.st.Pool, store.BatchInsertParams{ID: "b-order", SchemaID: "customer_message"}); err != nil {
		t.Fatal(err)
	}
	b.batch = "b-order"
	badEnum := strings.Replace(strings.Replace(albertRepair, `"manage_dispute_bill"`, `"dispute_bill"`, 1), "7149958241", "7149958247", 1)
	_, msg := b.failedItem(t, "customer_message", albertText, badEnum)

	var checks atomic.Int32
	held, release := make(chan struct{}), make(chan struct{})
	var releaseOnce sync.Once
	t.Cleanup(func() { releaseOnce.Do(func() { close(release) }) })
	h := b.srv.Handler()
	web := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost && strings.HasSuffix(r.URL.Path, "/check") && checks.Add(1) == 1 {
			close(held)
			<-release
		}
		h.ServeHTTP(w, r)
	}))
	t.Cleanup(web.Close)
	g := &browserRig{b: b, web: web, browser: sharedBrowser(t, 5*time.Minute)}
	tab := g.tab(t)
	g.login(t, tab, "alice", "correct horse battery")

	g.step(t, tab, "the item, claimed", chromedp.Navigate(web.URL+"/?batch=b-order"), chromedp.WaitVisible(chromedp.ID("items")),
		poll(`document.querySelectorAll('#items tbody tr.row').length === 1`), realKeys("c"),
		chromedp.WaitVisible(chromedp.CSS(`#lease .badge.mine`)), poll(`document.readyState === 'complete'`))
	var ok bool
	g.eval(t, tab, checksDone, &ok)
	// A prefix no option has: its check, held, would show an error.
	g.step(t, tab, "a prefix typed", realKeys("e"), realKeys("manage_d"))
	select {
	case <-held:
	case <-time.After(browserStep):
		t.Fatal("the page sent no check of the typed prefix")
	}
	// The rest of the option: a newer check, answered at once: valid.
	g.step(t, tab, "the option typed", realKeys("i"),
		poll(`document.querySelector('#check-status').textContent.trim() === 'valid'`))
	const digest = `document.querySelector('#validated').value`
	var newer, shown string
	g.eval(t, tab, digest, &newer)
	releaseOnce.Do(func() { close(release) })
	g.step(t, tab, "every check answered", poll(`window.__checks.done === window.__checks.started`))
	g.eval(t, tab, digest, &shown)
	if shown != newer {
		t.Errorf("after the older check answered last the form's validated digest is %q, want the newer check's %q", shown, newer)
	}
	g.step(t, tab, "approve", realKeys(kb.Escape), realKeys("a"))
	var cur store.Extraction
	for deadline := time.Now().Add(time.Minute); ; {
		var err error
		if cur, err = b.st.CurrentResultGet(context.Background(), b.st.Pool, store.CurrentResultGetParams{MessageID: msg}); err == nil {
			break
		}
		if time.Now().After(deadline) {
			var page string
			g.eval(t, tab, `(document.querySelector('#action-msg') || document.body).textContent.trim().slice(0, 300)`, &page)
			t.Fatalf("not approved: %v; the page says %q", err, page)
		}
		time.Sleep(20 * time.Millisecond) // polling the database with a deadline
	}
	if !strings.Contains(strings.ReplaceAll(string(cur.Data), `": `, `":`), `"intent":"manage_dispute_bill"`) {
		t.Fatalf("approved %s, want intent manage_dispute_bill", cur.Data)
	}
}

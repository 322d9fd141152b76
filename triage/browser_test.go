package triage_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/chromedp"
	"github.com/chromedp/chromedp/kb"

	"github.com/extractq/extractq/store"
)

// The end-to-end test drives Debian's chromium, headless, through the
// real pages: log in, claim with the keyboard, edit a field (the live
// check runs the page's script), approve with the keyboard, and check the
// result row; a second reviewer in another browser context cannot take
// the item; hostile message text stays text. It saves screenshots of the
// queue and of items to a folder it prints (TRIAGE_SCREENSHOTS, else a new
// temporary folder that is kept for looking at).

// chromiumPath returns the browser, or skips the test when there is none
// and CI is unset (in CI, make test installs it and the test must
// run).
func chromiumPath(t *testing.T) string {
	t.Helper()
	for _, name := range []string{"chromium", "chromium-browser"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	if os.Getenv("CI") == "" {
		t.Skip("chromium is not installed (apt-get install -y chromium); set CI to make this a failure")
	}
	t.Fatal("chromium is not installed, and CI is set: make test installs it (WITH_CHROMIUM=1 scripts/setup.sh)")
	return ""
}

// rrText is a real ABCD message (testdata/abcd, MIT) for return_request.
const rrText = "Hello, I've changed my mind about an order and I'd like a refund.\nNo, I've just changed my mind. Sorry.\n" +
	"Rodriguez Domingo\nUsername: rd542657\nEmail Address: rd542657@email.com\nOrder ID: 3764775976\n" +
	"Please refund my credit card directly.\nThanks!\nI don't have an account ID. Is an Order ID ok?\n" +
	"Order ID: 3764775976\nUsername: rd542657\n$84\nThank you.\nThat's all."

const rrReply = `{"intent":"refund_initiate","customer":{"full_name":"Rodriguez Domingo","email":"rd542657@email.com",` +
	`"account_id":null,"username":"rd542657","phone":null},"order":{"order_id":"3764775976","purchase_date":null,` +
	`"membership_level":null},"items":[{"product":"guess jacket","problem":"changed_mind","quantity":1}],` +
	`"refund":{"amount":"$84","method":"credit card"},"shipping":{"street_address":null,"city":null,"state":null,"zip_code":null}}`

// browserHostile is hostile text whose script, if it ever ran, would leave
// a mark the test reads.
const browserHostile = "Please help <script>window.__xss = 'script ran'</script> my parcel\n" +
	"\"><img src=x onerror=\"window.__xss='img ran'\"> order 4967029823\n" +
	"العميل يقول: لم يصل الطلب \u202Etxt.exe\u202C — name Alessandro Phoenix"

const browserHostileReply = `{"intent":"missing","flow":"shipping_issue","full_name":"Alessandro Phoenix",` +
	`"account_id":null,"username":null,"email":null,"phone":null,"membership_level":null,` +
	`"order_id":"4967029823","zip_code":null,"street_address":"\"><img src=x onerror=alert(1)>","city":null,"state":null,` +
	`"payment_method":null,"purchase_date":null,"refund_amount":null,"product_names":null}`

// Bounds of the browser tests' waits. Every wait is for a condition (an
// element visible, a script's value), so these only bound how long a
// step may take before the test fails naming it: generous, as chromium,
// the race-detector server and Postgres share a loaded machine with the
// rest of the suite. The watchdog bounds a whole test, below go test's
// default -timeout of 10 minutes for the package.
const (
	browserStep     = 2 * time.Minute
	browserPoll     = time.Minute
	browserWatchdog = 7 * time.Minute
)

func TestBrowserEndToEnd(t *testing.T) {
	chromiumPath(t)
	t.Parallel()
	ctx := context.Background()

	dir := os.Getenv("TRIAGE_SCREENSHOTS")
	if dir == "" {
		var err error
		if dir, err = os.MkdirTemp("", "triage-screenshots-"); err != nil {
			t.Fatal(err)
		}
	} else if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Logf("screenshots in %s", dir)

	b := newBundle(t, bundleOpts{})
	b.reviewer(t, "alice", "correct horse battery")
	b.reviewer(t, "bob", "bob's long password")
	albertID, albertMsg := b.failedItem(t, "customer_message", albertText, albertFirst, albertRepair)
	hostileID, _ := b.failedItem(t, "customer_message", browserHostile, browserHostileReply)
	rrID, _ := b.failedItem(t, "return_request", rrText, rrReply)
	noNameID, noNameMsg := b.failedItem(t, "customer_message", albertText, albertFirst, albertNoName)
	refusedID, _ := b.failedItem(t, "customer_message", albertText, albertFirst, albertRepair)
	b.failedItem(t, "customer_message", "an you check my order I think there's an extra fee\nRodriguez Domingo\nOrder ID: 9955347632\nguest",
		"Sure! Here is the record: ```json\n{\"intent\": \"status_mystery_fee\"}\n```")
	b.failedItem(t, "customer_message", "Hi\nI want to know why you guys still haven't refunded me\nChloe Zhang\nusername czhang28\norder id 2269137343",
		"I'm sorry, I can't help with that.")

	// Plain HTTP on 127.0.0.1: the browser keeps the Secure session
	// cookie there, as it does for any localhost origin.
	web := httptest.NewServer(b.srv.Handler())
	defer web.Close()

	// A bound on the whole test: past it every step fails at once
	// instead of hanging.
	browser := sharedBrowser(t, browserWatchdog)

	// Each reviewer has a browser context of their own (own cookies).
	newTab := func(t *testing.T) context.Context {
		tab, cancel := chromedp.NewContext(browser, chromedp.WithNewBrowserContext())
		t.Cleanup(cancel)
		if err := chromedp.Do(tab); err != nil {
			t.Fatal(err)
		}
		var mu sync.Mutex
		var dialogs []string
		_ = chromedp.Listen(tab, func(ev any) {
			if d, ok := ev.(*page.EventJavascriptDialogOpening); ok {
				mu.Lock()
				dialogs = append(dialogs, d.Message)
				mu.Unlock()
			}
		})
		t.Cleanup(func() {
			mu.Lock()
			defer mu.Unlock()
			if len(dialogs) > 0 {
				t.Errorf("the page opened dialogs: %q", dialogs)
			}
		})
		return tab
	}
	// step runs actions with a bound, naming the step on failure.
	step := func(t *testing.T, tab context.Context, name string, actions ...chromedp.Action[chromedp.Void]) {
		t.Helper()
		sctx, cancel := context.WithTimeout(tab, browserStep)
		defer cancel()
		if err := chromedp.Do(sctx, actions...); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
	}
	eval := func(t *testing.T, tab context.Context, expr string, out any) {
		t.Helper()
		sctx, cancel := context.WithTimeout(tab, browserStep)
		defer cancel()
		raw, err := chromedp.Run(sctx, chromedp.Evaluate[[]byte](expr, chromedp.EvalAwaitPromise))
		if err != nil {
			t.Fatalf("evaluate %s: %v", expr, err)
		}
		if err := json.Unmarshal(raw, out); err != nil {
			t.Fatalf("evaluate %s: %s: %v", expr, raw, err)
		}
	}
	shot := func(t *testing.T, tab context.Context, name string) {
		t.Helper()
		sctx, cancel := context.WithTimeout(tab, browserStep)
		defer cancel()
		png, err := chromedp.Run(sctx, chromedp.FullScreenshot(100))
		if err != nil {
			t.Fatalf("screenshot %s: %v", name, err)
		}
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, png, 0o644); err != nil {
			t.Fatal(err)
		}
		t.Logf("screenshot %s", path)
	}
	login := func(t *testing.T, tab context.Context, user, password string) {
		t.Helper()
		step(t, tab, "log in as "+user,
			chromedp.Navigate(web.URL+"/"),
			chromedp.WaitVisible(chromedp.ID("login")),
			chromedp.SendKeys(chromedp.ID("login"), user),
			chromedp.SendKeys(chromedp.ID("password"), password),
			chromedp.Click(chromedp.ID("login-submit")),
			chromedp.WaitVisible(chromedp.ID("items")),
		)
	}
	location := func(t *testing.T, tab context.Context) string {
		t.Helper()
		loc, err := chromedp.Run(tab, chromedp.Location())
		if err != nil {
			t.Fatal(err)
		}
		return loc
	}

	alice := newTab(t)
	bob := newTab(t)
	login(t, alice, "alice", "correct horse battery")
	shot(t, alice, "queue.png")

	// Alice claims the oldest item with the keyboard.
	step(t, alice, "claim with c",
		chromedp.KeyEvent("c"),
		chromedp.WaitVisible(chromedp.ID("editor")),
		chromedp.WaitVisible(chromedp.CSS(`#lease .badge.mine`)),
	)
	if loc := location(t, alice); !strings.Contains(loc, fmt.Sprintf("/items/%d", albertID)) {
		t.Fatalf("alice is on %s, want item %d", loc, albertID)
	}

	// Bob cannot take it: claim next gives him another item, alice's
	// item is read only for him, and the API refuses his claim.
	login(t, bob, "bob", "bob's long password")
	step(t, bob, "bob claims next", chromedp.Click(chromedp.ID("claim-next")), chromedp.WaitVisible(chromedp.ID("editor")))
	if loc := location(t, bob); strings.Contains(loc, fmt.Sprintf("/items/%d", albertID)) {
		t.Fatalf("bob got alice's item: %s", loc)
	}
	step(t, bob, "bob opens alice's item", chromedp.Navigate(fmt.Sprintf("%s/items/%d", web.URL, albertID)), chromedp.WaitVisible(chromedp.ID("lease")))
	var bobView struct {
		Disabled bool   `json:"disabled"`
		Lease    string `json:"lease"`
		Status   int    `json:"status"`
	}
	eval(t, bob, `(async () => {
		const r = await fetch(location.pathname.replace('/items/', '/api/v1/items/') + '/claim', {method: 'POST',
			headers: {'X-CSRF-Token': document.querySelector('meta[name=csrf-token]').content}});
		return {disabled: document.querySelector('#editor fieldset').disabled,
			lease: document.querySelector('#lease').textContent, status: r.status};
	})()`, &bobView)
	if !bobView.Disabled || !strings.Contains(bobView.Lease, "Claimed by alice") || bobView.Status != 409 {
		t.Errorf("bob's view of alice's item = %+v", bobView)
	}

	// Alice fixes the invented order id; the page's live check turns the
	// record valid without a reload.
	orderSel := chromedp.CSS(`[id="f:/order_id"]`)
	step(t, alice, "edit order_id",
		chromedp.Clear(orderSel),
		chromedp.SendKeys(orderSel, "7149958247"),
		discard(chromedp.Poll[bool](`document.querySelector('#check-status').textContent.trim() === 'valid'`,
			chromedp.WithPollingTimeout(browserPoll))),
	)
	shot(t, alice, "item.png")
	step(t, alice, "approve with a",
		chromedp.KeyEvent(kb.Escape), // leave the field, so the key is a shortcut
		chromedp.KeyEvent("a"),
		chromedp.WaitVisible(chromedp.ID("flash")),
	)
	flash, err := chromedp.Run(alice, chromedp.Text(chromedp.ID("flash")))
	if err != nil || !strings.Contains(flash, fmt.Sprintf("Approved item %d", albertID)) {
		t.Fatalf("flash after approval = %q, %v", flash, err)
	}

	// The result row: alice's record, human-made.
	cur, err := b.st.CurrentResultGet(ctx, b.st.Pool, store.CurrentResultGetParams{MessageID: albertMsg})
	if err != nil {
		t.Fatal(err)
	}
	var data map[string]any
	_ = json.Unmarshal(cur.Data, &data)
	if cur.Outcome != "approved" || cur.CreatedBy != "alice" || data["order_id"] != "7149958247" || data["full_name"] != "Albert Sanders" {
		t.Errorf("result = %+v, data %s", cur, cur.Data)
	}
	d, _ := b.st.TriageItemGet(ctx, b.st.Pool, albertID)
	if d.Item.Status != store.TriageApproved || d.Item.DecidedBy != "alice" {
		t.Errorf("item after approval = %+v", d.Item)
	}

	// Hostile text stays text: no script ran, no element was made from it.
	step(t, alice, "open the hostile item", chromedp.Navigate(fmt.Sprintf("%s/items/%d", web.URL, hostileID)), chromedp.WaitVisible(chromedp.ID("msgtext")))
	var hostile struct {
		XSS      any    `json:"xss"`
		Elements int    `json:"elements"`
		Text     string `json:"text"`
		Value    string `json:"value"`
		Title    string `json:"title"`
	}
	eval(t, alice, `({xss: window.__xss === undefined ? null : window.__xss,
		elements: document.querySelectorAll('#msgtext img, #msgtext script, main img, main script').length,
		text: document.querySelector('#msgtext').textContent,
		value: document.querySelector('[id="f:/street_address"]').value,
		title: document.title})`, &hostile)
	if hostile.XSS != nil || hostile.Elements != 0 {
		t.Errorf("customer text became markup: __xss=%v, %d elements", hostile.XSS, hostile.Elements)
	}
	for _, want := range []string{"<script>window.__xss = 'script ran'</script>", `"><img src=x onerror="window.__xss='img ran'">`, "RLO"} {
		if !strings.Contains(hostile.Text, want) {
			t.Errorf("message text lacks %q: %q", want, hostile.Text)
		}
	}
	if strings.ContainsRune(hostile.Text, '\u202E') {
		t.Error("the right-to-left override reached the page")
	}
	if hostile.Value != `"><img src=x onerror=alert(1)>` {
		t.Errorf("field value = %q", hostile.Value)
	}
	shot(t, alice, "item-hostile.png")

	// The queue after: the approved item is gone from the open list, and
	// a new item appears without a reload.
	step(t, alice, "queue again", chromedp.Navigate(web.URL+"/"), chromedp.WaitVisible(chromedp.ID("items")),
		discard(chromedp.Poll[bool](`document.querySelector('#livestate').textContent === 'live'`, chromedp.WithPollingTimeout(browserPoll))))
	var rows int
	eval(t, alice, `document.querySelectorAll('#items tbody tr.row').length`, &rows)
	newID, _ := b.failedItem(t, "customer_message", "my order 4967029823 never came\nAlessandro Phoenix", "{}")
	step(t, alice, "the new item appears",
		discard(chromedp.Poll[bool](fmt.Sprintf(`document.querySelectorAll('#items tbody tr.row').length === %d`, rows+1),
			chromedp.WithPollingTimeout(browserPoll))),
		chromedp.WaitVisible(chromedp.CSS(fmt.Sprintf(`tr[data-href^="/items/%d"]`, newID))),
	)
	shot(t, alice, "queue-after.png")

	// The nested editor, the bulk re-run and the audit pages.
	step(t, alice, "nested item", chromedp.Navigate(fmt.Sprintf("%s/items/%d", web.URL, rrID)), chromedp.WaitVisible(chromedp.ID("editor")))
	shot(t, alice, "item-nested.png")
	step(t, alice, "bulk re-run page", chromedp.Navigate(web.URL+"/rerun?schema=customer_message&kind=schema"), chromedp.WaitVisible(chromedp.ID("bulk-count")))
	shot(t, alice, "bulk-rerun.png")
	step(t, alice, "audit page", chromedp.Navigate(web.URL+"/audit"), chromedp.WaitVisible(chromedp.CSS("table.auditlog")))
	shot(t, alice, "audit.png")
	step(t, alice, "reports page", chromedp.Navigate(web.URL+"/reports?since=7d"), chromedp.WaitVisible(chromedp.ID("fields-table")))
	var report struct {
		Fields, Meters, Batches int
	}
	eval(t, alice, `({fields: document.querySelectorAll('#fields-table tbody td code.path').length,
		meters: document.querySelectorAll('#fields-table meter').length,
		batches: document.querySelectorAll('#batches-table tbody td code').length})`, &report)
	if report.Fields == 0 || report.Meters != report.Fields || report.Batches == 0 {
		t.Errorf("reports page: %+v, want failing fields with a meter each, and batches", report)
	}
	shot(t, alice, "reports.png")
	step(t, alice, "back to the queue", chromedp.Navigate(web.URL+"/"), chromedp.WaitVisible(chromedp.ID("items")))

	// j selects the first row, Enter opens it.
	step(t, alice, "j then Enter",
		chromedp.KeyEvent("j"),
		chromedp.WaitVisible(chromedp.CSS(`#items tr.row.sel`)),
		chromedp.KeyEvent(kb.Enter),
		chromedp.WaitVisible(chromedp.ID("msgtext")),
	)

	// Approve sends what the page validated (issue 16): the draft leaves
	// out the required name, and the page says so (1 error, not a null
	// that validates); the name typed and approved at once, before the
	// live check ran, is checked first and then approved.
	step(t, alice, "open the item without a name", chromedp.Navigate(fmt.Sprintf("%s/items/%d", web.URL, noNameID)),
		chromedp.WaitVisible(chromedp.ID("claim")), chromedp.KeyEvent("c"), chromedp.WaitVisible(chromedp.CSS(`#lease .badge.mine`)))
	var status string
	eval(t, alice, `document.querySelector('#check-status').textContent.trim()`, &status)
	if status != "1 error" {
		t.Errorf("check status of the item without a name = %q, want 1 error", status)
	}
	nameSel := chromedp.CSS(`[id="f:/full_name"]`)
	step(t, alice, "type the name and approve at once",
		chromedp.SendKeys(nameSel, "Albert Sanders"),
		chromedp.KeyEvent(kb.Escape),
		chromedp.KeyEvent("a"),
		chromedp.WaitVisible(chromedp.ID("flash")),
	)
	if cur, err := b.st.CurrentResultGet(ctx, b.st.Pool, store.CurrentResultGetParams{MessageID: noNameMsg}); err != nil ||
		!strings.Contains(string(cur.Data), `"full_name": "Albert Sanders"`) && !strings.Contains(string(cur.Data), `"full_name":"Albert Sanders"`) {
		t.Errorf("result after typing the name = %s, %v", cur.Data, err)
	}

	// A refused approve (a grounding error, no reason) shows the item at
	// its own address: a reload reads it, and posts nothing again.
	step(t, alice, "refused approve", chromedp.Navigate(fmt.Sprintf("%s/items/%d", web.URL, refusedID)),
		chromedp.WaitVisible(chromedp.ID("claim")), chromedp.KeyEvent("c"), chromedp.WaitVisible(chromedp.CSS(`#lease .badge.mine`)),
		chromedp.KeyEvent("a"),
		chromedp.WaitVisible(chromedp.CSS(`.msg.err`)),
	)
	if loc := location(t, alice); !strings.HasSuffix(strings.SplitN(loc, "?", 2)[0], fmt.Sprintf("/items/%d", refusedID)) {
		t.Errorf("after a refused approve the page is at %s, want /items/%d", loc, refusedID)
	}
	var reloaded struct {
		Nav string `json:"nav"`
		Err bool   `json:"err"`
	}
	step(t, alice, "reload", chromedp.Reload(), chromedp.WaitVisible(chromedp.ID("editor")))
	eval(t, alice, `({nav: performance.getEntriesByType('navigation')[0].type, err: !!document.querySelector('.msg.err')})`, &reloaded)
	if reloaded.Nav != "reload" || reloaded.Err {
		t.Errorf("after reload: %+v, want a reload showing the item, not the refused post again", reloaded)
	}
	shot(t, alice, "item-refused-reloaded.png")

	// The override reason is in reach of the keyboard: r, the reason,
	// Ctrl+Enter approves with it.
	step(t, alice, "override with r and Ctrl+Enter",
		chromedp.KeyEvent("r"),
		discard(chromedp.Poll[bool](`document.activeElement && document.activeElement.id === 'override-reason'`, chromedp.WithPollingTimeout(browserPoll))),
		chromedp.SendKeys(chromedp.ID("override-reason"), "order id confirmed by phone"),
		chromedp.KeyEvent(kb.Enter, chromedp.KeyModifiers(chromedp.ModifierCtrl)),
		chromedp.WaitVisible(chromedp.ID("flash")),
	)
	if d, _ := b.st.TriageItemGet(ctx, b.st.Pool, refusedID); d.Item.Status != store.TriageApproved {
		t.Errorf("item %d after the override = %s, want approved", refusedID, d.Item.Status)
	}
}

// discard makes an action that drops the value of a.
func discard[T any](a chromedp.Action[T]) chromedp.Action[chromedp.Void] {
	return func(ctx context.Context, t *chromedp.Target) (chromedp.Void, error) {
		_, err := a(ctx, t)
		return chromedp.Void{}, err
	}
}

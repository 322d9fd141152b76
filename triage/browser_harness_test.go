package triage_test

import (
	"context"
	"encoding/json"
	"net/http/httptest"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/chromedp"
)

// browserRig is a test's context of the shared chromium (sharedBrowser)
// and the triage server it drives, for the flow tests
// (browser_flow_test.go): each reviewer gets a tab in a browser context
// of their own (own cookies).
type browserRig struct {
	b       *bundle
	web     *httptest.Server
	browser context.Context
}

// chromium is the one headless chromium of this test binary, started by
// the first browser test that asks (sharedBrowser) and stopped by
// TestMain: starting one per test cost more CPU time than the tests'
// pages. Each test opens its tabs in browser contexts of its own (own
// cookies and storage, as separate browsers have), in a context of the
// browser that its watchdog and its end cancel.
var chromium struct {
	mu      sync.Mutex
	browser context.Context // nil until started
	stop    func()
}

func TestMain(m *testing.M) {
	code := m.Run()
	chromium.mu.Lock()
	if chromium.stop != nil {
		chromium.stop()
	}
	chromium.mu.Unlock()
	os.Exit(code)
}

// sharedBrowser returns a context of the binary's chromium (starting it
// on first use; skipping the test without it, as chromiumPath does),
// cancelled when the test ends or past limit, so that past limit every
// step of the test fails at once instead of hanging. Tabs made from it
// with chromedp.WithNewBrowserContext are the test's alone.
func sharedBrowser(t *testing.T, limit time.Duration) context.Context {
	t.Helper()
	chrome := chromiumPath(t)
	chromium.mu.Lock()
	defer chromium.mu.Unlock()
	if chromium.browser == nil {
		dir, err := os.MkdirTemp("", "triage-chromium-")
		if err != nil {
			t.Fatal(err)
		}
		alloc, cancelAlloc := chromedp.NewExecAllocator(context.Background(),
			chromedp.ExecPath(chrome),
			chromedp.Flag("headless", true),
			chromedp.Flag("no-sandbox", true),
			chromedp.Flag("disable-gpu", true),
			chromedp.Flag("disable-dev-shm-usage", true),
			chromedp.Flag("disable-background-networking", true),
			chromedp.Flag("disable-component-update", true),
			chromedp.Flag("disable-sync", true),
			// Work no test looks at, cut for CPU time (a headless chromium
			// of the browser tests took about 7% less, alternated runs):
			// one renderer process a navigation (a new BrowsingInstance,
			// a spare process, a back-forward cache entry) where the tests
			// need one a tab, first paint held back, services, and the
			// field trials and component extensions.
			chromedp.Flag("disable-features", "PaintHolding,RenderDocument,BackForwardCache,ProactivelySwapBrowsingInstance,"+
				"SpareRendererForSitePerProcess,Translate,OptimizationHints,MediaRouter,DialMediaRouteProvider,AcceptCHFrame,"+
				"HttpsUpgrades,LensOverlay,GlobalMediaControls"),
			chromedp.Flag("disable-extensions", true),
			chromedp.Flag("disable-component-extensions-with-background-pages", true),
			chromedp.Flag("disable-field-trial-config", true),
			chromedp.Flag("no-first-run", true),
			chromedp.Flag("no-default-browser-check", true),
			chromedp.Flag("hide-scrollbars", true),
			chromedp.Flag("lang", "en-US"),
			chromedp.UserDataDir(dir),
			chromedp.WindowSize(1440, 1000),
		)
		browser, cancelBrowser := chromedp.NewContext(alloc)
		stop := func() {
			cancelBrowser()
			cancelAlloc()
			os.RemoveAll(dir)
		}
		if err := chromedp.Do(browser); err != nil { // start it, without a deadline
			stop()
			t.Fatalf("starting chromium: %v", err)
		}
		chromium.browser, chromium.stop = browser, stop
	}
	ctx, cancel := context.WithCancel(chromium.browser)
	t.Cleanup(cancel)
	watchdog := time.AfterFunc(limit, cancel)
	t.Cleanup(func() { watchdog.Stop() })
	return ctx
}

// newBrowserRig opens a context of the shared chromium (sharedBrowser,
// with limit) against a plain-HTTP server of b, stopped at the test's
// end.
func newBrowserRig(t *testing.T, b *bundle, limit time.Duration) *browserRig {
	t.Helper()
	browser := sharedBrowser(t, limit)
	// Plain HTTP on 127.0.0.1: the browser keeps the Secure session
	// cookie there, as it does for any localhost origin.
	web := httptest.NewServer(b.srv.Handler())
	t.Cleanup(web.Close)
	return &browserRig{b: b, web: web, browser: browser}
}

// tab opens a tab in a new browser context; a JavaScript dialog it opens
// fails the test.
func (g *browserRig) tab(t *testing.T) context.Context {
	t.Helper()
	tab, cancel := chromedp.NewContext(g.browser, chromedp.WithNewBrowserContext())
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

// step runs actions within browserStep (browser_test.go), naming the
// step on failure: a step once took over 20s on a loaded machine.
func (g *browserRig) step(t *testing.T, tab context.Context, name string, actions ...chromedp.Action[chromedp.Void]) {
	t.Helper()
	sctx, cancel := context.WithTimeout(tab, browserStep)
	defer cancel()
	if err := chromedp.Do(sctx, actions...); err != nil {
		t.Fatalf("%s: %v", name, err)
	}
}

// eval evaluates expr (awaiting a promise) into out.
func (g *browserRig) eval(t *testing.T, tab context.Context, expr string, out any) {
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

// login logs in through the login page and waits for the queue.
func (g *browserRig) login(t *testing.T, tab context.Context, user, password string) {
	t.Helper()
	g.step(t, tab, "log in as "+user,
		chromedp.Navigate(g.web.URL+"/"),
		chromedp.WaitVisible(chromedp.ID("login")),
		chromedp.SendKeys(chromedp.ID("login"), user),
		chromedp.SendKeys(chromedp.ID("password"), password),
		chromedp.Click(chromedp.ID("login-submit")),
		chromedp.WaitVisible(chromedp.ID("items")),
	)
}

// poll waits up to 10s for expr to be true.
func poll(expr string) chromedp.Action[chromedp.Void] {
	return discard(chromedp.Poll[bool](expr, chromedp.WithPollingTimeout(browserPoll)))
}

package triage_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/extractq/extractq/store"
)

func TestSessionsAndSafety(t *testing.T) {
	t.Parallel()

	t.Run("LoginRequiredCookieAndHeaders", func(t *testing.T) {
		t.Parallel()
		b := newBundle(t, bundleOpts{})
		b.reviewer(t, "alice", "correct horse battery")
		c := b.client(t)

		r := c.get("/")
		if r.status != http.StatusSeeOther || !strings.HasPrefix(r.location, "/login") {
			t.Fatalf("GET / logged out: %d %q", r.status, r.location)
		}
		r = c.get("/login")
		for h, want := range map[string]string{
			"Content-Security-Policy": "script-src 'self'",
			"X-Content-Type-Options":  "nosniff",
			"X-Frame-Options":         "DENY",
			"Cache-Control":           "no-store",
		} {
			if !strings.Contains(r.header.Get(h), want) {
				t.Errorf("%s = %q, want %q in it", h, r.header.Get(h), want)
			}
		}
		if !strings.Contains(r.header.Get("Content-Security-Policy"), "frame-ancestors 'none'") {
			t.Errorf("CSP lacks frame-ancestors: %q", r.header.Get("Content-Security-Policy"))
		}
		if strings.Contains(r.body, "<script>") || strings.Contains(r.body, " style=") {
			t.Error("the page holds inline script or style")
		}

		// A login without the CSRF token is refused.
		r = c.post("/login", url.Values{"login": {"alice"}, "password": {"correct horse battery"}, "csrf_token": {"forged"}})
		if r.status != http.StatusForbidden {
			t.Fatalf("login with a forged CSRF token: %d", r.status)
		}
		r = c.login("alice", "wrong password!")
		if r.status != http.StatusUnauthorized || !strings.Contains(r.body, "Wrong login or password") {
			t.Fatalf("wrong password: %d", r.status)
		}
		r = c.login("alice", "correct horse battery")
		if r.status != http.StatusSeeOther || r.location != "/" {
			t.Fatalf("login: %d %q", r.status, r.location)
		}
		var cookie string
		for _, sc := range r.header.Values("Set-Cookie") {
			if strings.HasPrefix(sc, "extractq_triage=") {
				cookie = sc
			}
		}
		for _, attr := range []string{"HttpOnly", "Secure", "SameSite=Lax"} {
			if !strings.Contains(cookie, attr) {
				t.Errorf("session cookie %q lacks %s", cookie, attr)
			}
		}
		r = c.get("/")
		if r.status != http.StatusOK || !strings.Contains(r.body, "alice") {
			t.Fatalf("queue after login: %d", r.status)
		}

		// State changes need the session's token and this origin.
		id, _ := b.failedItem(t, "customer_message", albertText, albertFirst, albertRepair)
		path := fmt.Sprintf("/items/%d/claim", id)
		if r := c.post(path, url.Values{"csrf_token": {"stale"}}); r.status != http.StatusForbidden {
			t.Errorf("claim with a wrong token: %d", r.status)
		}
		req, _ := http.NewRequest(http.MethodPost, b.ts.URL+path, strings.NewReader("csrf_token="+url.QueryEscape(c.csrf)))
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		req.Header.Set("Origin", "https://evil.example")
		if r := c.do(req); r.status != http.StatusForbidden {
			t.Errorf("claim from another origin: %d", r.status)
		}
		if r := c.post(path, nil); r.status != http.StatusSeeOther {
			t.Errorf("claim: %d %s", r.status, r.body)
		}

		if r := c.post("/logout", nil); r.status != http.StatusSeeOther {
			t.Fatalf("logout: %d", r.status)
		}
		if r := c.get("/"); r.status != http.StatusSeeOther {
			t.Errorf("GET / after logout: %d", r.status)
		}
		entries, _ := b.st.AuditList(context.Background(), b.st.Pool, store.AuditListParams{Actor: "alice"})
		var actions []string
		for _, e := range entries {
			actions = append(actions, e.Action)
		}
		if got := strings.Join(actions, ","); got != "logout,claim,login,login_failed" { // the wrong password first
			t.Errorf("audit = %s", got)
		}
	})

	t.Run("RefererWhenNoOrigin", func(t *testing.T) {
		t.Parallel()
		b, c := newAliceBundle(t)
		tok := newToken(t, b, "robot")
		id, _ := b.failedItem(t, "customer_message", albertText, albertFirst, albertRepair)
		claim := fmt.Sprintf("/api/v1/items/%d/claim", id)
		// post makes a session POST with the right CSRF token and the given
		// Origin and Referer ("" leaves the header out).
		post := func(path, origin, referer string, form bool) response {
			t.Helper()
			var req *http.Request
			if form { // a page's form
				req, _ = http.NewRequest(http.MethodPost, b.ts.URL+path, strings.NewReader("csrf_token="+url.QueryEscape(c.csrf)))
				req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
			} else { // the page script's API call
				req, _ = http.NewRequest(http.MethodPost, b.ts.URL+path, nil)
				req.Header.Set("X-CSRF-Token", c.csrf)
			}
			if origin != "" {
				req.Header.Set("Origin", origin)
			}
			if referer != "" {
				req.Header.Set("Referer", referer)
			}
			return c.do(req)
		}
		plain := strings.Replace(b.ts.URL, "https://", "http://", 1) // this host, another scheme
		for _, tc := range []struct {
			name, origin, referer string
			want                  int
		}{
			{"a foreign Referer, no Origin", "", "http://evil.example/x", http.StatusForbidden},
			{"a foreign Referer, Origin null", "null", "https://evil.example/x", http.StatusForbidden},
			{"a Referer of this host over another scheme", "", plain + "/items/1", http.StatusForbidden},
			{"a Referer of another port", "", "https://127.0.0.1:1/items/1", http.StatusForbidden},
			{"a Referer that is no URL", "", "::", http.StatusForbidden},
			{"a Referer of this origin, no Origin", "", b.ts.URL + fmt.Sprintf("/items/%d", id), http.StatusOK},
			{"neither: the CSRF token guards", "", "", http.StatusOK},
			{"an Origin of this origin, no Referer", b.ts.URL, "", http.StatusOK},
		} {
			if r := post(claim, tc.origin, tc.referer, false); r.status != tc.want {
				t.Errorf("API claim with %s: %d %s, want %d", tc.name, r.status, r.body, tc.want)
			}
		}
		// A page's form is checked the same way.
		if r := post(fmt.Sprintf("/items/%d/claim", id), "", "http://evil.example/x", true); r.status != http.StatusForbidden {
			t.Errorf("form claim with a foreign Referer: %d", r.status)
		}
		if r := post(fmt.Sprintf("/items/%d/claim", id), "", b.ts.URL+"/", true); r.status != http.StatusSeeOther {
			t.Errorf("form claim with this origin's Referer: %d", r.status)
		}
		// A token-authenticated call is no session POST: Origin and Referer
		// do not matter.
		req, _ := http.NewRequest(http.MethodPost, b.ts.URL+"/api/v1/items/claim-next", nil)
		req.Header.Set("Authorization", "Bearer "+tok)
		req.Header.Set("Referer", "http://evil.example/x")
		if r := b.client(t).do(req); r.status != http.StatusNotFound { // alice holds the only item
			t.Errorf("token claim-next with a foreign Referer: %d %s, want 404", r.status, r.body)
		}
		req, _ = http.NewRequest(http.MethodPost, b.ts.URL+fmt.Sprintf("/api/v1/items/%d/release", id), nil)
		req.Header.Set("Authorization", "Bearer "+tok)
		req.Header.Set("Referer", "http://evil.example/x")
		if r := b.client(t).do(req); r.status != http.StatusConflict { // alice's claim: not the token's to release
			t.Errorf("token release with a foreign Referer: %d %s, want 409", r.status, r.body)
		}
	})

	t.Run("DisabledAccountLosesSession", func(t *testing.T) {
		t.Parallel()
		b := newBundle(t, bundleOpts{})
		b.reviewer(t, "bob", "bob's long password")
		c := b.client(t)
		if r := c.login("bob", "bob's long password"); r.status != http.StatusSeeOther {
			t.Fatalf("login: %d", r.status)
		}
		if _, err := b.st.ReviewerSetDisabled(context.Background(), b.st.Pool, "bob", true); err != nil {
			t.Fatal(err)
		}
		if r := c.get("/"); r.status != http.StatusSeeOther {
			t.Errorf("disabled reviewer still served: %d", r.status)
		}
		if r := c.login("bob", "bob's long password"); r.status != http.StatusUnauthorized {
			t.Errorf("disabled reviewer logged in: %d", r.status)
		}
	})

	t.Run("LocalOnlyWithoutAccounts", func(t *testing.T) {
		t.Parallel()
		b := newBundle(t, bundleOpts{local: true})
		c := b.client(t)
		r := c.get("/")
		if r.status != http.StatusOK || !strings.Contains(r.body, "localhost only") {
			t.Fatalf("local queue: %d", r.status)
		}
		// A name that is not loopback (DNS rebinding) is refused.
		req, _ := http.NewRequest(http.MethodGet, b.ts.URL+"/", nil)
		req.Host = "evil.example:443"
		if r := c.do(req); r.status != http.StatusMisdirectedRequest {
			t.Errorf("foreign Host: %d", r.status)
		}
		// Under /api/ the refusal is the API's JSON error.
		req, _ = http.NewRequest(http.MethodGet, b.ts.URL+"/api/v1/items", nil)
		req.Host = "evil.example"
		if r := c.do(req); r.status != http.StatusMisdirectedRequest ||
			!strings.HasPrefix(r.body, `{"error":{"code":"misdirected_request","message":`) {
			t.Errorf("foreign Host on the API: %d %s, want 421 misdirected_request in JSON", r.status, r.body)
		}
		// Still no state change without the CSRF token.
		id, _ := b.failedItem(t, "customer_message", albertText, albertFirst)
		if r := c.post(fmt.Sprintf("/items/%d/claim", id), url.Values{"csrf_token": {"x"}}); r.status != http.StatusForbidden {
			t.Errorf("local claim without token: %d", r.status)
		}
		if r := c.post(fmt.Sprintf("/items/%d/claim", id), nil); r.status != http.StatusSeeOther {
			t.Errorf("local claim: %d", r.status)
		}
		// A script (no session, no CSRF token) reads the API, and its
		// writes are refused with what to do instead.
		if resp, err := b.ts.Client().Get(b.ts.URL + "/api/v1/items"); err != nil || resp.StatusCode != http.StatusOK {
			t.Errorf("local API read by a script: %v %v", resp, err)
		} else {
			resp.Body.Close()
		}
		resp, err := b.ts.Client().Post(fmt.Sprintf("%s/api/v1/items/%d/release", b.ts.URL, id), "application/json", nil)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusForbidden || !strings.Contains(string(body), "while serving without login the API's POST routes take the web page's CSRF token only") ||
			!strings.Contains(string(body), "triage admin token create") {
			t.Errorf("local API write by a script: %d %s", resp.StatusCode, body)
		}
		// Once an account exists, serving without login ends, and the live
		// stream opened without login ends with it.
		req, _ = http.NewRequest(http.MethodGet, b.ts.URL+"/events", nil)
		resp, err = b.ts.Client().Do(req)
		if err != nil || resp.StatusCode != http.StatusOK {
			t.Fatalf("local live stream: %v %v", resp, err)
		}
		defer resp.Body.Close()
		streamEnded := make(chan error, 1)
		go func() { _, err := io.Copy(io.Discard, resp.Body); streamEnded <- err }()
		b.reviewer(t, "carol", "carol's long password")
		select {
		case <-streamEnded:
		case <-time.After(30 * time.Second):
			t.Error("the live stream opened without login outlived the first account")
		}
		for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(50 * time.Millisecond) {
			if r = c.get("/"); r.status != http.StatusOK || time.Now().After(deadline) {
				break
			}
		}
		if r.status != http.StatusSeeOther || !strings.HasPrefix(r.location, "/login") {
			t.Fatalf("queue after an account was added: %d %s, want a redirect to the login", r.status, r.location)
		}
		if r := c.login("carol", "carol's long password"); r.status != http.StatusSeeOther {
			t.Errorf("login after local mode ended: %d", r.status)
		}
		if r := c.get("/"); r.status != http.StatusOK || strings.Contains(r.body, "localhost only") || !strings.Contains(r.body, "carol") {
			t.Errorf("queue after login: %d, local badge shown or reviewer missing", r.status)
		}
	})
}

func TestQueueAndItemPages(t *testing.T) {
	t.Parallel()

	t.Run("AuditPageLeavesOutBadLinks", func(t *testing.T) {
		t.Parallel()
		b := newBundle(t, bundleOpts{})
		b.reviewer(t, "alice", "correct horse battery")
		b.reviewer(t, "bob", "bob's long password")
		alice, bob := b.client(t), b.client(t)
		alice.login("alice", "correct horse battery")
		bob.login("bob", "bob's long password")
		id1, _ := b.failedItem(t, "customer_message", albertText, albertFirst, albertRepair)
		id2, _ := b.failedItem(t, "customer_message", albertText+"\nps", albertFirst)
		alice.post(fmt.Sprintf("/items/%d/claim", id1), nil)
		bob.post(fmt.Sprintf("/items/%d/claim", id2), nil)
		row := func(id int64) string { return fmt.Sprintf(`<td><a href="/items/%d">%d</a></td>`, id, id) }

		for _, tc := range []struct {
			path     string
			want     []string // in the notice
			rows, no []int64  // entries shown, and not
		}{
			{"/audit?item=abc", []string{"item &#34;abc&#34;: want an item id (a positive number)"}, []int64{id1, id2}, nil},
			{"/audit?item=-3", []string{"item &#34;-3&#34;: want an item id"}, []int64{id1, id2}, nil},
			{"/audit?item_id=3", []string{"unknown parameter &#34;item_id&#34;: the audit log takes item, actor"}, []int64{id1, id2}, nil},
			{"/audit?item=99999", []string{"item 99999: there is no such item"}, []int64{id1, id2}, nil},
			{"/audit?item_id=99999", []string{"unknown parameter &#34;item_id&#34;: the audit log takes item, actor"}, []int64{id1, id2}, nil},
			{"/audit?item=abc&actor=bob", []string{"item &#34;abc&#34;"}, []int64{id2}, []int64{id1}}, // the good value is kept
			{fmt.Sprintf("/audit?item=%d&item=%d", id1, id2), []string{"&#34;item&#34; given more than once: the audit log reads the first value only"}, []int64{id1}, []int64{id2}},
		} {
			r := alice.get(tc.path)
			notice := "" // from the section's start to its filter form
			if i := strings.Index(r.body, `<section class="audit">`); i >= 0 {
				notice = r.body[i:]
				notice = notice[:max(0, strings.Index(notice, `<form class="filters"`))]
			}
			if r.status != http.StatusOK || !strings.Contains(notice, `id="audit-notice"`) ||
				!strings.Contains(notice, "Left out of this link (the audit log below is shown without it)") {
				t.Errorf("GET %s: %d, want the audit log with a notice; notice %q", tc.path, r.status, notice)
			}
			for _, want := range tc.want {
				if !strings.Contains(notice, want) {
					t.Errorf("GET %s: the notice lacks %q: %q", tc.path, want, notice)
				}
			}
			for _, id := range tc.rows {
				if !strings.Contains(r.body, row(id)) {
					t.Errorf("GET %s: item %d's entries are missing", tc.path, id)
				}
			}
			for _, id := range tc.no {
				if strings.Contains(r.body, row(id)) {
					t.Errorf("GET %s: item %d's entries are shown", tc.path, id)
				}
			}
		}
		// A good link has no notice.
		for _, path := range []string{"/audit", fmt.Sprintf("/audit?item=%d", id1), "/audit?actor=bob", "/audit?item=&actor="} {
			if r := alice.get(path); r.status != http.StatusOK || strings.Contains(r.body, "audit-notice") {
				t.Errorf("GET %s: %d, a notice on a good link", path, r.status)
			}
		}
		if r := alice.get(fmt.Sprintf("/audit?item=%d", id1)); !strings.Contains(r.body, row(id1)) || strings.Contains(r.body, row(id2)) {
			t.Errorf("the item filter is not applied")
		}
		// The API refuses the same links with 400, naming the same problem.
		tok := newToken(t, b, "robot")
		for _, tc := range []struct{ path, want string }{
			{"/api/v1/audit?item_id=abc", `item_id "abc": want an item id (a positive number)`},
			{"/api/v1/audit?item_id=99999", "item_id 99999: there is no such item"},
			{"/api/v1/audit?item=3", `unknown parameter "item": GET /api/v1/audit takes item_id, actor, limit`},
		} {
			r := b.api(t, tok, "GET", tc.path, "")
			if e := apiErr(t, r); r.status != http.StatusBadRequest || !strings.Contains(e.Message, tc.want) {
				t.Errorf("GET %s: %d %s, want 400 with %q", tc.path, r.status, r.body, tc.want)
			}
		}
		if r := b.api(t, tok, "GET", fmt.Sprintf("/api/v1/audit?item_id=%d", id1), ""); r.status != http.StatusOK ||
			!strings.Contains(r.body, fmt.Sprintf(`"triage_item_id":%d`, id1)) || strings.Contains(r.body, fmt.Sprintf(`"triage_item_id":%d`, id2)) {
			t.Errorf("API audit of an item: %d %s", r.status, r.body)
		}
	})

	t.Run("CustomerTextIsShownAsText", func(t *testing.T) {
		t.Parallel()
		b, c := newAliceBundle(t)
		id, _ := b.failedItem(t, "customer_message", hostileText, hostileReply)

		for _, path := range []string{"/", fmt.Sprintf("/items/%d", id)} {
			r := c.get(path)
			if r.status != http.StatusOK {
				t.Fatalf("GET %s: %d", path, r.status)
			}
			for _, bad := range []string{"<script>alert", "<img src=x", "onerror=alert(2)>", "\u202E", "\u200B"} {
				if strings.Contains(r.body, bad) {
					t.Errorf("GET %s: page holds %q unescaped", path, bad)
				}
			}
			if !strings.Contains(r.body, "&lt;script&gt;alert(&#39;xss&#39;)&lt;/script&gt;") {
				t.Errorf("GET %s: the escaped script text is missing", path)
			}
			if !strings.Contains(r.body, "RLO") {
				t.Errorf("GET %s: the right-to-left override is not shown as a marker", path)
			}
		}
		r := c.get(fmt.Sprintf("/items/%d", id))
		if !strings.Contains(r.body, `&#34;&gt;&lt;img src=x onerror=alert(2)&gt;`) {
			t.Error("the attribute breakout is not shown as text")
		}
		if !strings.Contains(r.body, `class="ctl" title="U&#43;202E RIGHT-TO-LEFT OVERRIDE`) || !strings.Contains(r.body, ">ZWSP<") {
			t.Error("control characters are not shown as markers")
		}
		if !strings.Contains(r.body, "right-to-left text") {
			t.Error("right-to-left text is not noted")
		}
		// The field value the model copied is escaped inside the input too.
		if !strings.Contains(r.body, `value="&lt;script&gt;alert(&#39;name&#39;)&lt;/script&gt;"`) {
			t.Error("the field value is not escaped in its input")
		}
	})

	t.Run("ErasedMessage", func(t *testing.T) {
		t.Parallel()
		b, c := newAliceBundle(t)
		id, msgID := b.failedItem(t, "customer_message", albertText, albertFirst, albertRepair)
		var key store.MessageKey
		if err := b.st.Pool.QueryRow(t.Context(), `SELECT source, external_id FROM messages WHERE id = $1`, msgID).Scan(&key.Source, &key.ExternalID); err != nil {
			t.Fatal(err)
		}
		if res, err := b.st.MessagesErase(t.Context(), b.st.Pool, []store.MessageKey{key},
			store.ErasureParams{Actor: "dpo", Via: store.ViaCLI, Reason: "request 118"}); err != nil || res[0].Status != store.ErasureErased {
			t.Fatalf("erase = %+v, %v", res, err)
		}
		r := c.get(fmt.Sprintf("/items/%d", id))
		if r.status != http.StatusOK {
			t.Fatalf("GET item: %d", r.status)
		}
		if !strings.Contains(r.body, `id="erased"`) || !strings.Contains(r.body, "dpo") {
			t.Error("the item page does not say the text was erased, and by whom")
		}
		for _, text := range []string{"Albert Sanders", "U85ALFLG2Z", "7149958247", "7149958241"} {
			if strings.Contains(r.body, text) {
				t.Errorf("the erased item's page still shows %q", text)
			}
		}
		if !strings.Contains(r.body, `class="status s-rejected"`) {
			t.Error("the erased item is not shown closed (rejected)")
		}
		if strings.Contains(r.body, "no reply held a JSON object") || !strings.Contains(r.body, "the replies were erased") {
			t.Error("the erased item's record is said to come from replies without JSON")
		}
		if !strings.Contains(r.body, "text was erased, and its results with it") || strings.Contains(r.body, "has no result yet") {
			t.Error("the erased item's page does not say why the message has no result")
		}
	})

	t.Run("ListsFiltersAndShowsTheFailure", func(t *testing.T) {
		t.Parallel()
		b, c := newAliceBundle(t)
		id1, _ := b.failedItem(t, "customer_message", albertText, albertFirst, albertRepair)
		id2, _ := b.failedItem(t, "customer_message", albertText+" again", "I cannot help with that.")

		r := c.get("/")
		if !strings.Contains(r.body, fmt.Sprintf("#%d", id1)) || !strings.Contains(r.body, fmt.Sprintf("#%d", id2)) {
			t.Fatal("queue does not list both items")
		}
		if strings.Index(r.body, fmt.Sprintf("#%d", id1)) > strings.Index(r.body, fmt.Sprintf("#%d", id2)) {
			t.Error("queue is not oldest first")
		}
		r = c.get("/?kind=rule")
		if !strings.Contains(r.body, fmt.Sprintf("#%d", id1)) || strings.Contains(r.body, fmt.Sprintf("#%d<", id2)) {
			t.Error("kind filter")
		}
		// Links keep the filter.
		for _, want := range []string{`href="/?kind=rule&amp;status=approved"`, fmt.Sprintf(`href="/items/%d?kind=rule"`, id1),
			`action="/claim-next?kind=rule"`, `data-src="/queue/live?kind=rule"`} {
			if !strings.Contains(r.body, want) {
				t.Errorf("queue page lacks %s", want)
			}
		}
		r = c.get("/?path=%2Forder_id")
		if !strings.Contains(r.body, `<strong id="total">1</strong>`) {
			t.Error("path filter count")
		}
		r = c.get("/?path=%2F") // errors about the whole record
		if !strings.Contains(r.body, fmt.Sprintf("#%d<", id2)) || strings.Contains(r.body, fmt.Sprintf("#%d<", id1)) {
			t.Error("root path filter")
		}
		// The queue page keeps working under a stale or mistyped link: it
		// leaves out what it cannot mean, says so at the top (the
		// parameter and the values allowed), and lists the rest.
		for _, tc := range []struct {
			path string
			want []string
		}{
			{"/?kind=bogus", []string{"kind &#34;bogus&#34;: want one of parse, schema, rule, tool,"}},
			{"/?schema=nosuch", []string{"schema &#34;nosuch&#34; is not configured here: want one of customer_message, return_request"}},
			{"/?status=closed", []string{"status &#34;closed&#34;: want one of open, mine, approved, rejected, rerun, any"}},
			{"/?path=order_id", []string{"path &#34;order_id&#34;: want a JSON Pointer"}},
			{"/?sort=up", []string{"sort &#34;up&#34;: want newest or oldest"}},
			{"/?statuss=open&order=weird", []string{"unknown parameters &#34;order&#34;, &#34;statuss&#34;: the queue takes status, schema, kind, path, batch, age, sort, q, prompt_version, schema_version, model, page"}},
			{"/?schema=nosuch&kind=bogus&statuss=x", []string{"schema &#34;nosuch&#34; is not configured here", "kind &#34;bogus&#34;: want", "unknown parameter &#34;statuss&#34;"}},
		} {
			r := c.get(tc.path)
			notice := "" // from the queue section's start to its filter form
			if i := strings.Index(r.body, `<section class="queue">`); i >= 0 {
				notice = r.body[i:]
				notice = notice[:max(0, strings.Index(notice, `<form class="filters"`))]
			}
			if r.status != http.StatusOK || !strings.Contains(notice, `id="filter-notice"`) ||
				!strings.Contains(r.body, fmt.Sprintf("#%d<", id1)) || !strings.Contains(r.body, fmt.Sprintf("#%d<", id2)) {
				t.Errorf("GET %s: %d, want the queue with both items and a notice", tc.path, r.status)
			}
			for _, want := range tc.want {
				if !strings.Contains(notice, want) {
					t.Errorf("GET %s: the notice lacks %q", tc.path, want)
				}
			}
			// What was left out is not carried on by the page's links.
			rest := strings.Replace(r.body, notice, "", 1)
			for _, bad := range []string{"bogus", "nosuch", "closed", "path=order_id", "statuss", "weird", "sort=up"} {
				if strings.Contains(tc.path, bad) && strings.Contains(rest, bad) {
					t.Errorf("GET %s: the page still carries %q", tc.path, bad)
				}
			}
		}
		// A good link has no notice; a bad value next to good ones keeps
		// the good ones.
		if r := c.get("/?kind=rule"); strings.Contains(r.body, "filter-notice") {
			t.Error("notice on a good link")
		}
		if r := c.get("/?kind=rule&schema=nosuch"); !strings.Contains(r.body, "filter-notice") ||
			!strings.Contains(r.body, fmt.Sprintf("#%d<", id1)) || strings.Contains(r.body, fmt.Sprintf("#%d<", id2)) ||
			!strings.Contains(r.body, `action="/claim-next?kind=rule"`) {
			t.Error("kind=rule&schema=nosuch: the kind filter is not kept")
		}
		// The other pages that read the filter refuse what they cannot
		// mean: they act on it or are reached from a link the queue page
		// made.
		for _, tc := range []struct{ method, path, want string }{
			{"GET", "/queue/live?kind=bogus", "kind &#34;bogus&#34;"},
			{"GET", "/rerun?schema=nosuch", "schema &#34;nosuch&#34; is not configured here"},
			{"POST", "/claim-next?kind=bogus", "kind &#34;bogus&#34;"},
		} {
			var r response
			if tc.method == "POST" {
				r = c.post(tc.path, nil)
			} else {
				r = c.get(tc.path)
			}
			if r.status != http.StatusBadRequest || !strings.Contains(r.body, tc.want) || strings.Contains(r.body, "No item matches") {
				t.Errorf("%s %s: %d, want 400 with %q", tc.method, tc.path, r.status, tc.want)
			}
		}
		// An item of a schema no longer configured is listed, but its
		// schema facet is no link to a filter that would be refused.
		if _, err := b.st.Pool.Exec(context.Background(), `UPDATE triage_items SET schema_id = 'retired_schema' WHERE id = $1`, id2); err != nil {
			t.Fatal(err)
		}
		r = c.get("/")
		if r.status != http.StatusOK || !strings.Contains(r.body, `<span title="not configured here: read only">retired_schema</span>`) ||
			strings.Contains(r.body, "schema=retired_schema") || !strings.Contains(r.body, `href="/?schema=customer_message"`) {
			t.Errorf("schema facets of a retired schema: %d", r.status)
		}
		live := c.get("/queue/live?kind=parse")
		if live.status != http.StatusOK || !strings.Contains(live.body, fmt.Sprintf("#%d", id2)) || strings.Contains(live.body, "<html") {
			t.Errorf("live fragment: %d", live.status)
		}

		r = c.get(fmt.Sprintf("/items/%d", id1))
		for _, want := range []string{
			`<mark class="found"`,                  // grounded values found in the message
			`title="/account_id"`,                  // ... with their field
			"value does not appear in the message", // the grounding error
			"first reply → repair reply",           // the repair as a diff
			`class="ddel">-   &#34;refund_amount&#34;: &#34;20 dollars&#34;`,
			"regenerate", "$0.000440", "520 ms", // calls with cost and latency
			`name="v:/order_id"`, // the editor, generated from the schema
			"Nobody holds this item.",
		} {
			if !strings.Contains(r.body, want) {
				t.Errorf("item page lacks %q", want)
			}
		}
		if r := c.get("/items/999999"); r.status != http.StatusNotFound {
			t.Errorf("unknown item: %d", r.status)
		}
		if r := c.get("/nope"); r.status != http.StatusNotFound || !strings.Contains(r.body, "Back to the queue") {
			t.Errorf("unknown page: %d", r.status)
		}
		if r := c.get("/items/abc"); r.status != http.StatusBadRequest {
			t.Errorf("bad item id: %d", r.status)
		}
	})
}

// TestValuesThatAreNotText: a query or path value that is not UTF-8 text
// or that holds a NUL byte (which Postgres text cannot hold: it used to
// make a 500) is refused by the API with a 400 naming the parameter, left
// out by the lenient pages with a notice, and refused by the strict
// pages. Form and body text that the store cleans (reasons, notes) is
// taken.
func TestValuesThatAreNotText(t *testing.T) {
	t.Parallel()
	const (
		nulLine   = `: the value holds a NUL byte`
		utf8Line  = `: the value is not UTF-8 text`
		badActor  = `actor "\x00"` + nulLine
		badBatch  = `batch "\xff"` + utf8Line
		badBatch0 = `batch "\x00"` + nulLine
	)

	t.Run("Static", func(t *testing.T) {
		t.Parallel()
		b := newBundle(t, bundleOpts{})
		c := b.client(t)
		for _, path := range []string{"/static/%ff", "/static/a%ff.css", "/static/%00"} {
			if r := c.get(path); r.status != http.StatusNotFound {
				t.Errorf("GET %s: %d, want 404", path, r.status)
			}
		}
		if r := c.get("/static/style.css"); r.status != http.StatusOK {
			t.Errorf("GET /static/style.css: %d", r.status)
		}
	})

	t.Run("API", func(t *testing.T) {
		t.Parallel()
		b := newBundle(t, bundleOpts{})
		tok := newToken(t, b, "robot")
		_, msgID := b.failedItem(t, "customer_message", albertText, albertFirst, albertRepair)
		for _, tc := range []struct{ method, path, body, want string }{
			{"GET", "/api/v1/audit?actor=%00", "", badActor},
			{"GET", "/api/v1/audit?actor=%ff", "", `actor "\xff"` + utf8Line},
			{"GET", "/api/v1/audit?actor=%C0%80", "", `actor "\xc0\x80"` + utf8Line}, // an overlong NUL
			{"GET", "/api/v1/audit?actor=robot%00&limit=5", "", `actor "robot\x00"` + nulLine},
			{"GET", "/api/v1/items?batch=%ff", "", badBatch},
			{"GET", "/api/v1/items?path=%2Forder_id%00", "", `path "/order_id\x00"` + nulLine},
			{"GET", "/api/v1/items?batch=%ff&kind=rule&path=%2F%00", "", `path "/\x00"` + nulLine + "; " + badBatch},
			{"GET", "/api/v1/items/counts?batch=%00", "", badBatch0},
			{"POST", "/api/v1/items/claim-next?batch=%00", "", badBatch0},
			{"GET", "/api/v1/rerun/count?schema=customer_message&batch=%ff", "", badBatch},
			{"POST", "/api/v1/rerun?schema=customer_message&batch=%ff", `{"confirmed": 1}`, badBatch},
			{"GET", "/api/v1/reports/failing-fields?batch=%00", "", badBatch0},
			{"GET", "/api/v1/reports/repair?batch=%ff", "", badBatch},
			{"GET", "/api/v1/reports/failing-fields?since=%00", "", `since "\x00"` + nulLine},
			{"GET", "/api/v1/batches?schema=%00", "", `schema "\x00"` + nulLine},
			{"GET", fmt.Sprintf("/api/v1/messages/%d/result?schema=%%ff", msgID), "", `schema "\xff"` + utf8Line},
			{"GET", "/api/v1/batches/%ff", "", `path value id "\xff"` + utf8Line},
			{"GET", "/api/v1/batches/" + b.batch + "%00", "", `path value id "` + b.batch + `\x00"` + nulLine},
			{"GET", "/api/v1/items/%ff", "", `path value id "\xff"` + utf8Line},
		} {
			r := b.api(t, tok, tc.method, tc.path, tc.body)
			if e := apiErr(t, r); r.status != http.StatusBadRequest || e.Code != "invalid" || !strings.Contains(e.Message, tc.want) {
				t.Errorf("%s %s: %d %q, want 400 with %q", tc.method, tc.path, r.status, e.Message, tc.want)
			}
		}
		// The same routes with text values answer.
		for _, path := range []string{"/api/v1/audit?actor=robot", "/api/v1/items?batch=" + b.batch, "/api/v1/items/counts?batch=nosuch",
			"/api/v1/reports/failing-fields?batch=" + b.batch, "/api/v1/batches/" + b.batch} {
			if r := b.api(t, tok, "GET", path, ""); r.status != http.StatusOK {
				t.Errorf("GET %s: %d %s", path, r.status, r.body)
			}
		}
	})

	t.Run("Pages", func(t *testing.T) {
		t.Parallel()
		b, c := newAliceBundle(t)
		id1, _ := b.failedItem(t, "customer_message", albertText, albertFirst, albertRepair)
		id2, _ := b.failedItem(t, "customer_message", albertText+"\nps", "no JSON here")
		c.post(fmt.Sprintf("/items/%d/claim", id1), nil)
		esc := func(s string) string { return strings.ReplaceAll(s, `"`, "&#34;") }

		// The lenient pages leave the value out, name it in the notice
		// and show the rest.
		for _, tc := range []struct {
			path, section, noticeID string
			want                    []string // in the notice
			shown                   []string // in the page
			gone                    []string // not in the page, outside the notice
		}{
			{"/audit?actor=%00", "audit", "audit-notice", []string{esc(badActor)},
				[]string{fmt.Sprintf(`<a href="/items/%d">`, id1), `name="actor" value=""`}, nil},
			{"/audit?actor=%ff", "audit", "audit-notice", []string{esc(`actor "\xff"` + utf8Line)},
				[]string{fmt.Sprintf(`<a href="/items/%d">`, id1), `name="actor" value=""`}, nil},
			{"/audit?actor=%C0%80", "audit", "audit-notice", []string{esc(`actor "\xc0\x80"` + utf8Line)},
				[]string{`name="actor" value=""`}, nil},
			{fmt.Sprintf("/audit?actor=%%00&item=%d", id1), "audit", "audit-notice", []string{esc(badActor)},
				[]string{fmt.Sprintf(`name="item" value="%d"`, id1)}, nil},
			{"/?batch=%ff", "queue", "filter-notice", []string{esc(badBatch)},
				[]string{fmt.Sprintf("#%d<", id1), fmt.Sprintf("#%d<", id2)}, []string{"batch=%ff", "batch=%FF"}},
			{"/?batch=%00&kind=rule&path=%2F%ff", "queue", "filter-notice", []string{esc(`path "/\xff"` + utf8Line), esc(badBatch0)},
				[]string{fmt.Sprintf("#%d<", id1), `action="/claim-next?kind=rule"`}, []string{"batch=%00", "path=%2F%FF", fmt.Sprintf("#%d<", id2)}},
			{"/reports?batch=%00", "reports", "report-notice", []string{esc(badBatch0)},
				[]string{`name="batch" value=""`, "<code>" + b.batch + "</code>"}, nil},
			{"/reports?batch=%ff&schema=customer_message", "reports", "report-notice", []string{esc(badBatch)},
				[]string{`<option selected>customer_message</option>`}, nil},
		} {
			r := c.get(tc.path)
			notice := "" // from the section's start to its filter form
			if i := strings.Index(r.body, `<section class="`+tc.section+`">`); i >= 0 {
				notice = r.body[i:]
				notice = notice[:max(0, strings.Index(notice, `<form class="filters"`))]
			}
			if r.status != http.StatusOK || !strings.Contains(notice, `id="`+tc.noticeID+`"`) {
				t.Errorf("GET %s: %d, want the page with a notice; notice %q", tc.path, r.status, notice)
				continue
			}
			for _, want := range tc.want {
				if !strings.Contains(notice, want) {
					t.Errorf("GET %s: the notice lacks %q: %q", tc.path, want, notice)
				}
			}
			rest := strings.Replace(r.body, notice, "", 1)
			for _, s := range tc.shown {
				if !strings.Contains(rest, s) {
					t.Errorf("GET %s: the page lacks %q", tc.path, s)
				}
			}
			for _, s := range tc.gone {
				if strings.Contains(rest, s) {
					t.Errorf("GET %s: the page still carries %q", tc.path, s)
				}
			}
		}
		// The item page carries no filter it cannot read.
		for _, path := range []string{fmt.Sprintf("/items/%d?batch=%%ff", id1), fmt.Sprintf("/items/%d?path=%%2F%%00", id1)} {
			if r := c.get(path); r.status != http.StatusOK || strings.Contains(r.body, "batch=%FF") || strings.Contains(r.body, "path=%2F%00") {
				t.Errorf("GET %s: %d, want the item page without the filter", path, r.status)
			}
		}
		// The pages that act on a link, or are reached from one the queue
		// page made, refuse it.
		for _, tc := range []struct{ method, path, want string }{
			{"GET", "/queue/live?batch=%ff", esc(badBatch)},
			{"POST", "/claim-next?batch=%00", esc(badBatch0)},
			{"GET", "/rerun?schema=customer_message&batch=%ff", esc(badBatch)},
			{"POST", "/rerun?schema=customer_message&batch=%ff", esc(badBatch)},
		} {
			var r response
			if tc.method == "POST" {
				r = c.post(tc.path, url.Values{"confirmed": {"1"}})
			} else {
				r = c.get(tc.path)
			}
			if r.status != http.StatusBadRequest || !strings.Contains(r.body, tc.want) {
				t.Errorf("%s %s: %d, want 400 with %q", tc.method, tc.path, r.status, tc.want)
			}
		}
		// A login that is not text is no account's.
		for _, login := range []string{"alice\x00", "\xff"} {
			if r := b.client(t).login(login, "correct horse battery"); r.status != http.StatusUnauthorized || !strings.Contains(r.body, "Wrong login or password.") {
				t.Errorf("login %q: %d, want 401", login, r.status)
			}
		}
	})

	t.Run("Forms", func(t *testing.T) {
		t.Parallel()
		ctx := context.Background()
		b := newBundle(t, bundleOpts{})
		tok := newToken(t, b, "robot")
		b.reviewer(t, "alice", "correct horse battery")
		c := b.client(t)
		c.login("alice", "correct horse battery")
		var ids []int64
		for i := range 7 {
			id, _ := b.failedItem(t, "customer_message", fmt.Sprintf("%s\n%d", albertText, i), albertFirst, albertRepair)
			ids = append(ids, id)
		}
		// The store keeps reasons and notes as text: U+FFFD for each NUL
		// and each byte that is not UTF-8 (store.CleanText). Each decision
		// on a page claims the next item, so the API's are of the last.
		reason := func(id int64) string {
			var s string
			if err := b.st.Pool.QueryRow(ctx, `SELECT coalesce(decision_reason, '') FROM triage_items WHERE id = $1`, id).Scan(&s); err != nil {
				t.Fatal(err)
			}
			return s
		}
		c.post(fmt.Sprintf("/items/%d/claim", ids[0]), nil)
		if r := c.post(fmt.Sprintf("/items/%d/reject", ids[0]), url.Values{"reason": {"not an order\x00\xff"}}); r.status != http.StatusSeeOther {
			t.Errorf("reject: %d %s", r.status, r.body)
		} else if got := reason(ids[0]); got != "not an order\uFFFD\uFFFD" {
			t.Errorf("reject reason = %q", got)
		}
		c.post(fmt.Sprintf("/items/%d/claim", ids[1]), nil)
		if r := c.post(fmt.Sprintf("/items/%d/rerun", ids[1]), url.Values{"note": {"v2\x00\xc0\x80"}}); r.status != http.StatusSeeOther {
			t.Errorf("rerun: %d %s", r.status, r.body)
		}
		c.post(fmt.Sprintf("/items/%d/claim", ids[2]), nil)
		form := albertForm("7149958241") // the invented order id: a grounding error to override
		form.Set("override_reason", "the customer\x00 said so\xff")
		// A record value holding a NUL byte is the validator's to refuse
		// (rule nul), as the worker's is.
		form.Set("v:/full_name", "Albert\x00 Sanders")
		if r := c.post(fmt.Sprintf("/items/%d/approve", ids[2]), form); r.status != http.StatusUnprocessableEntity ||
			!strings.Contains(r.body, "string holds a NUL character") {
			t.Errorf("approve a record holding a NUL: %d", r.status)
		}
		form.Set("v:/full_name", "Albert Sanders\xff")
		if r := c.post(fmt.Sprintf("/items/%d/check", ids[2]), form); r.status != http.StatusOK {
			t.Errorf("check a record holding a byte that is not UTF-8: %d", r.status)
		}
		form.Set("v:/full_name", "Albert Sanders")
		if r := c.post(fmt.Sprintf("/items/%d/approve", ids[2]), form); r.status != http.StatusSeeOther {
			t.Errorf("approve with an override: %d", r.status)
		} else if got := reason(ids[2]); got != "the customer\uFFFD said so\uFFFD" {
			t.Errorf("override reason = %q", got)
		}

		b.api(t, tok, "POST", fmt.Sprintf("/api/v1/items/%d/claim", ids[4]), "")
		if r := b.api(t, tok, "POST", fmt.Sprintf("/api/v1/items/%d/reject", ids[4]), "{\"reason\": \"spam\\u0000 \xff\"}"); r.status != http.StatusOK {
			t.Errorf("API reject: %d %s", r.status, r.body)
		} else if got := reason(ids[4]); got != "spam\uFFFD \uFFFD" {
			t.Errorf("API reject reason = %q", got)
		}
		b.api(t, tok, "POST", fmt.Sprintf("/api/v1/items/%d/claim", ids[5]), "")
		if r := b.api(t, tok, "POST", fmt.Sprintf("/api/v1/items/%d/rerun", ids[5]), `{"note": "v2\u0000"}`); r.status != http.StatusOK {
			t.Errorf("API rerun: %d %s", r.status, r.body)
		}
		b.api(t, tok, "POST", fmt.Sprintf("/api/v1/items/%d/claim", ids[6]), "")
		if r := b.api(t, tok, "POST", fmt.Sprintf("/api/v1/items/%d/approve", ids[6]),
			`{"record": `+strings.Replace(albertRepair, "Albert Sanders", `Albert\u0000 Sanders`, 1)+`, "override_reason": "said so"}`); r.status != http.StatusUnprocessableEntity ||
			!strings.Contains(r.body, "string holds a NUL character") {
			t.Errorf("API approve of a record holding a NUL: %d %s", r.status, r.body)
		}
		if r := b.api(t, tok, "POST", fmt.Sprintf("/api/v1/items/%d/approve", ids[6]),
			`{"record": `+albertRepair+`, "override_reason": "said so\u0000 on the phone"}`); r.status != http.StatusOK {
			t.Errorf("API approve with an override: %d %s", r.status, r.body)
		}
		// Bulk re-runs, of the page and of the API, with such a note.
		_, count, _ := strings.Cut(c.get("/rerun?schema=customer_message").body, `<strong id="bulk-count">`)
		count, _, _ = strings.Cut(count, "<")
		if r := c.post("/rerun?schema=customer_message", url.Values{"confirmed": {count}, "note": {"all\x00\xff"}}); r.status != http.StatusSeeOther ||
			r.location != "/?schema=customer_message" {
			t.Errorf("bulk re-run of %q items: %d %q", count, r.status, r.location)
		}
		b.failedItem(t, "customer_message", albertText+"\nlast", albertFirst)
		r := b.api(t, tok, "GET", "/api/v1/rerun/count?schema=customer_message", "")
		var n struct{ Count int }
		_ = json.Unmarshal([]byte(r.body), &n)
		if r := b.api(t, tok, "POST", "/api/v1/rerun?schema=customer_message", fmt.Sprintf(`{"confirmed": %d, "note": "all\u0000"}`, n.Count)); r.status != http.StatusOK {
			t.Errorf("API bulk re-run: %d %s", r.status, r.body)
		}
		// The audit log shows the cleaned text.
		if r := c.get("/audit"); r.status != http.StatusOK || !strings.Contains(r.body, "not an order⟨U&#43;FFFD⟩⟨U&#43;FFFD⟩") {
			t.Errorf("audit log: %d %s", r.status, r.body)
		}
	})
}

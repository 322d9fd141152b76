package triage_test

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/crypto/bcrypt"

	"github.com/extractq/extractq/store"
	"github.com/extractq/extractq/store/storetest"
	"github.com/extractq/extractq/triage"
)

// TestLoginNext checks where a login sends the reviewer: only to a path
// of this site, whatever the next parameter holds, both when a logged-in
// reviewer opens the login page and when the login form is posted.
func TestLoginNext(t *testing.T) {
	t.Parallel()
	b := newBundle(t, bundleOpts{logins: 1000})
	b.reviewer(t, "alice", "correct horse battery")
	c := b.client(t)
	c.login("alice", "correct horse battery")

	for _, tc := range []struct {
		next, want string
	}{
		{"/\t/evil.example", "/"}, // a browser drops the TAB: //evil.example
		{"/\n/evil.example", "/"},
		{"/\r/evil.example", "/"},
		{"/\\evil.example", "/"}, // a browser reads \ as /
		{"\\/evil.example", "/"},
		{"/x\\..\\..\\evil.example", "/"},
		{"//evil.example", "/"},
		{"///evil.example", "/"},
		{"https://evil.example", "/"},
		{"https:/evil.example", "/"},
		{"javascript:alert(1)", "/"},
		{"/\x00", "/"},
		{"/\x0b/evil.example", "/"},
		{"/\x7f/evil.example", "/"},
		{" /x", "/"},
		{"/x ", "/"},
		{"/\u3000/evil.example", "/"},
		{"/items/1#frag", "/"},
		{"", "/"},
		{"/" + strings.Repeat("a", 3000), "/"},
		// Percent-encoded bytes are a path of this site: a browser does not
		// decode them in a Location header.
		{"/%09/evil.example", "/%09/evil.example"},
		{"/%2F/evil.example", "/%2F/evil.example"},
		{"/%5Cevil.example", "/%5Cevil.example"},
		// Pages of this site are kept, with their query.
		{"/items/12?status=open&path=%2Forder_id", "/items/12?status=open&path=%2Forder_id"},
		{"/audit", "/audit"},
	} {
		// Logged in already: the login page sends the reviewer on.
		resp, err := c.http.Get(b.ts.URL + "/login?next=" + url.QueryEscape(tc.next))
		if err != nil {
			t.Errorf("GET /login?next=%.60q logged in: %v", tc.next, err)
		} else {
			resp.Body.Close()
			if loc := resp.Header.Get("Location"); resp.StatusCode != http.StatusSeeOther || loc != tc.want {
				t.Errorf("GET /login?next=%.60q logged in: %d Location %.80q, want 303 %q", tc.next, resp.StatusCode, loc, tc.want)
			}
		}

		// The login form posted with next, by a reviewer not logged in.
		fresh := b.client(t)
		fresh.get("/login")
		form := url.Values{"login": {"alice"}, "password": {"correct horse battery"}, "next": {tc.next}, "csrf_token": {fresh.csrf}}
		req, _ := http.NewRequest(http.MethodPost, b.ts.URL+"/login", strings.NewReader(form.Encode()))
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		req.Header.Set("Origin", b.ts.URL)
		resp, err = fresh.http.Do(req)
		if err != nil {
			t.Errorf("POST /login next=%.60q: %v", tc.next, err)
			continue
		}
		resp.Body.Close()
		if loc := resp.Header.Get("Location"); resp.StatusCode != http.StatusSeeOther || loc != tc.want {
			t.Errorf("POST /login next=%.60q: %d Location %.80q, want 303 %q", tc.next, resp.StatusCode, loc, tc.want)
		}
	}
}

// TestChangesEndSignIns checks that a new password, and a disabling
// followed by an enabling, end the account's sessions and API tokens: the
// old session cookie is sent to the login page (or refused by the API
// with 401) and the old token is refused with 401.
func TestChangesEndSignIns(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name     string
		commands [][]string // admin commands, each with stdin
		password string     // to log in with afterwards
	}{
		{"SetPassword", [][]string{{"a brand new passphrase\n", "set-password", "-login", "robot", "-password-stdin"}}, "a brand new passphrase"},
		{"DisableEnable", [][]string{{"", "disable", "-login", "robot"}, {"", "enable", "-login", "robot"}}, "a long enough password"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			b := newBundle(t, bundleOpts{})
			tok := newToken(t, b, "robot")
			b.reviewer(t, "keeper", "a long enough password") // another admin, so robot may be disabled
			// Two sessions: one to open a page with, one to call the API
			// with (the first refused request ends a session's row).
			pages, api := b.client(t), b.client(t)
			for _, c := range []*client{pages, api} {
				if r := c.login("robot", "a long enough password"); r.status != http.StatusSeeOther {
					t.Fatalf("login: %d", r.status)
				}
			}
			if r := pages.get("/"); r.status != http.StatusOK {
				t.Fatalf("queue before: %d", r.status)
			}
			if r := api.get("/api/v1/me"); r.status != http.StatusOK {
				t.Fatalf("API with the session before: %d", r.status)
			}
			if r := b.api(t, tok, "GET", "/api/v1/me", ""); r.status != http.StatusOK {
				t.Fatalf("API with the token before: %d", r.status)
			}

			for _, cmd := range tc.commands {
				out, err := runAdmin(t, b, cmd[0], cmd[1:]...)
				if err != nil {
					t.Fatalf("admin %v: %v", cmd[1:], err)
				}
				t.Logf("admin %s: %s", cmd[1], strings.TrimSpace(out))
			}

			if r := pages.get("/"); r.status != http.StatusSeeOther || !strings.HasPrefix(r.location, "/login") {
				t.Errorf("GET / with the old session: %d %q, want 303 to /login", r.status, r.location)
			}
			if r := api.get("/api/v1/me"); r.status != http.StatusUnauthorized {
				t.Errorf("GET /api/v1/me with the old session: %d %s, want 401", r.status, r.body)
			}
			if r := b.api(t, tok, "GET", "/api/v1/me", ""); r.status != http.StatusUnauthorized {
				t.Errorf("GET /api/v1/me with the old token: %d %s, want 401", r.status, r.body)
			}

			// The reviewer logs in again, and a new token works.
			c := b.client(t)
			if r := c.login("robot", tc.password); r.status != http.StatusSeeOther {
				t.Fatalf("login afterwards: %d", r.status)
			}
			if r := c.get("/"); r.status != http.StatusOK {
				t.Errorf("queue after logging in again: %d", r.status)
			}
			out, err := runAdmin(t, b, "", "token", "create", "-login", "robot", "-name", "again")
			if err != nil {
				t.Fatal(err)
			}
			if r := b.api(t, apiTokenIn(t, out), "GET", "/api/v1/me", ""); r.status != http.StatusOK {
				t.Errorf("a new token: %d %s", r.status, r.body)
			}
		})
	}
}

// runAdmin runs a triage admin command with stdin.
func runAdmin(t *testing.T, b *bundle, stdin string, args ...string) (string, error) {
	t.Helper()
	var out bytes.Buffer
	err := triage.Admin(t.Context(), b.st, args, triage.AdminIO{In: strings.NewReader(stdin), Out: &out, Actor: "admin:test", BcryptCost: 4})
	return out.String(), err
}

// apiTokenIn returns the API token printed in out.
func apiTokenIn(t *testing.T, out string) string {
	t.Helper()
	tok := regexp.MustCompile(`eqt_[A-Za-z0-9_-]{43}`).FindString(out)
	if tok == "" {
		t.Fatalf("no token in %q", out)
	}
	return tok
}

// TestOriginScheme checks that a session's POST must come from the
// server's own origin, scheme included: a page of this host over the
// other scheme is another origin (RFC 6454), in both directions, and a
// client's X-Forwarded-Proto does not change the server's scheme. With
// PublicURL, the origin is the configured one.
func TestOriginScheme(t *testing.T) {
	t.Parallel()
	type try struct {
		name            string
		origin, referer string // "" leaves the header out
		forwardedProto  string
		want            int
	}
	// run logs alice in on b and makes a session POST for each try.
	run := func(t *testing.T, b *bundle, tries []try) {
		t.Helper()
		b.reviewer(t, "alice", "correct horse battery")
		c := b.client(t)
		if r := c.login("alice", "correct horse battery"); r.status != http.StatusSeeOther {
			t.Fatalf("login: %d %s", r.status, r.body)
		}
		id, _ := b.failedItem(t, "customer_message", albertText, albertFirst, albertRepair)
		for _, tc := range tries {
			req, _ := http.NewRequest(http.MethodPost, b.ts.URL+"/api/v1/items/"+strconv.FormatInt(id, 10)+"/claim", nil)
			req.Header.Set("X-CSRF-Token", c.csrf)
			for h, v := range map[string]string{"Origin": tc.origin, "Referer": tc.referer, "X-Forwarded-Proto": tc.forwardedProto} {
				if v != "" {
					req.Header.Set(h, v)
				}
			}
			if r := c.do(req); r.status != tc.want {
				t.Errorf("%s: claim with Origin %q, Referer %q, X-Forwarded-Proto %q: %d %s, want %d",
					tc.name, tc.origin, tc.referer, tc.forwardedProto, r.status, r.body, tc.want)
			}
		}
	}

	t.Run("TLSServer", func(t *testing.T) {
		t.Parallel()
		b := newBundle(t, bundleOpts{})
		host := strings.TrimPrefix(b.ts.URL, "https://")
		run(t, b, []try{
			{"this host over http", "http://" + host, "", "", http.StatusForbidden},
			{"this host over http, Referer", "", "http://" + host + "/items/1", "", http.StatusForbidden},
			{"another port", "https://" + strings.Split(host, ":")[0] + ":1", "", "", http.StatusForbidden},
			{"another host", "https://evil.example", "", "", http.StatusForbidden},
			{"not an origin", "ftp://" + host, "", "", http.StatusForbidden},
			{"this origin", "https://" + host, "", "", http.StatusOK},
			{"this origin in capitals", "HTTPS://" + strings.ToUpper(host), "", "", http.StatusOK},
			{"this origin, Referer", "", "https://" + host + "/items/1", "", http.StatusOK},
		})
	})

	t.Run("PlainServer", func(t *testing.T) {
		t.Parallel()
		b := newBundle(t, bundleOpts{plain: true})
		host := strings.TrimPrefix(b.ts.URL, "http://")
		run(t, b, []try{
			{"this host over https", "https://" + host, "", "", http.StatusForbidden},
			{"this host over https, Referer", "", "https://" + host + "/items/1", "", http.StatusForbidden},
			{"this host over https, said to be so", "https://" + host, "", "https", http.StatusForbidden},
			{"this origin", "http://" + host, "", "", http.StatusOK},
			{"this origin, Referer", "", "http://" + host + "/", "", http.StatusOK},
			{"an opaque origin", "null", "", "", http.StatusForbidden},
			{"an opaque origin, with this Referer", "null", "http://" + host + "/", "", http.StatusForbidden},
		})
		// The refusal says what to do when the server is behind a TLS proxy.
		c := b.client(t)
		c.login("alice", "correct horse battery")
		req, _ := http.NewRequest(http.MethodPost, b.ts.URL+"/api/v1/items/claim-next", nil)
		req.Header.Set("X-CSRF-Token", c.csrf)
		req.Header.Set("Origin", "https://"+host)
		if r := c.do(req); r.status != http.StatusForbidden || !strings.Contains(r.body, "-public-url https://"+host) {
			t.Errorf("claim-next from the https page of a plain server: %d %s, want 403 naming -public-url", r.status, r.body)
		}
	})

	t.Run("PublicURL", func(t *testing.T) {
		t.Parallel()
		b := newBundle(t, bundleOpts{plain: true, public: "https://triage.example"})
		host := strings.TrimPrefix(b.ts.URL, "http://")
		run(t, b, []try{
			{"the public origin over http", "http://triage.example", "", "", http.StatusForbidden},
			{"the address served, over http", "http://" + host, "", "", http.StatusForbidden},
			{"the address served, over https", "https://" + host, "", "", http.StatusForbidden},
			{"the public origin, Referer over http", "", "http://triage.example/items/1", "", http.StatusForbidden},
			{"the public origin", "https://triage.example", "", "", http.StatusOK},
			{"the public origin with its default port", "https://triage.example:443", "", "", http.StatusOK},
			{"the public origin, Referer", "", "https://triage.example/items/1", "", http.StatusOK},
		})
		if r := b.client(t).get("/login"); !strings.Contains(r.header.Get("Strict-Transport-Security"), "max-age=") {
			t.Errorf("no HSTS with an https PublicURL: %q", r.header.Get("Strict-Transport-Security"))
		}
	})

	t.Run("BadPublicURL", func(t *testing.T) {
		t.Parallel()
		st := storetest.NewStore(t)
		for _, bad := range []string{"triage.example", "ftp://triage.example", "https://", "https://triage.example/triage", "https://u@triage.example", "https://triage.example/?x=1"} {
			_, err := triage.New(triage.Config{Store: st, Schemas: loadSchemas(t), PublicURL: bad})
			if err == nil || !strings.Contains(err.Error(), "PublicURL") {
				t.Errorf("PublicURL %q: %v, want an error naming PublicURL", bad, err)
			}
		}
	})
}

// TestDummyHashCost checks that a login that names no account is checked
// against a hash at bcrypt's default cost unless Config.BcryptCost says
// otherwise (the tests' accounts are hashed at the least cost, and their
// servers' dummy hashes too), and that a cost bcrypt refuses is refused.
func TestDummyHashCost(t *testing.T) {
	t.Parallel()
	st := storetest.NewStore(t)
	for _, tc := range []struct{ cost, want int }{{0, bcrypt.DefaultCost}, {bcrypt.MinCost, bcrypt.MinCost}} {
		srv, err := triage.New(triage.Config{Store: st, Schemas: loadSchemas(t), BcryptCost: tc.cost})
		if err != nil {
			t.Fatal(err)
		}
		if got := srv.DummyHashCost(); got != tc.want {
			t.Errorf("BcryptCost %d: the dummy hash's cost is %d, want %d", tc.cost, got, tc.want)
		}
		srv.Close()
	}
	for _, bad := range []int{bcrypt.MinCost - 1, bcrypt.MaxCost + 1} {
		if _, err := triage.New(triage.Config{Store: st, Schemas: loadSchemas(t), BcryptCost: bad}); err == nil || !strings.Contains(err.Error(), "BcryptCost") {
			t.Errorf("BcryptCost %d: %v, want an error naming BcryptCost", bad, err)
		}
	}
}

// TestFailedLoginsAudited checks that each failed login is in the audit
// log with the login tried, why it failed and the client's address, never
// the password; and that a flood of refused attempts is recorded once a
// minute, not once per attempt. The login limiter reads a clock the test
// moves, so no attempt gets a token back while the test runs, however
// slowly (5 a minute is one back every 12s of the wall clock).
func TestFailedLoginsAudited(t *testing.T) {
	t.Parallel()
	b := newBundle(t, bundleOpts{logins: 5})
	var clock struct {
		sync.Mutex
		now time.Time
	}
	clock.now = time.Now()
	b.srv.SetLoginClock(func() time.Time {
		clock.Lock()
		defer clock.Unlock()
		return clock.now
	})
	b.reviewer(t, "alice", "correct horse battery")
	b.reviewer(t, "bob", "bob's long password")
	if _, err := b.st.ReviewerSetDisabled(t.Context(), b.st.Pool, "bob", true); err != nil {
		t.Fatal(err)
	}
	c := b.client(t)
	for _, try := range []struct{ login, password string }{
		{"alice", "Secret-guess-1"},
		{"nobody", "Secret-guess-2"},
		{"bob", "bob's long password"},
		{"\u202eecila", "Secret-guess-3"},
		{"alice", "Secret-guess-4"},
		{"alice", "Secret-guess-5"}, // the sixth from this address: refused
		{"alice", "Secret-guess-6"},
		{"alice", "Secret-guess-7"},
	} {
		if r := c.login(try.login, try.password); r.status != http.StatusUnauthorized && r.status != http.StatusTooManyRequests {
			t.Fatalf("login %q: %d", try.login, r.status)
		}
	}
	// A minute on, the limiter has its tokens back: the next attempt is
	// tried (and audited as a wrong password), not refused.
	clock.Lock()
	clock.now = clock.now.Add(time.Minute)
	clock.Unlock()
	if r := c.login("alice", "Secret-guess-8"); r.status != http.StatusUnauthorized {
		t.Errorf("login a minute after the flood: %d, want 401", r.status)
	}

	entries, err := b.st.AuditList(t.Context(), b.st.Pool, store.AuditListParams{})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, e := range entries {
		if e.Action != store.AuditLoginFailed {
			continue
		}
		var after map[string]string
		if err := json.Unmarshal(e.After, &after); err != nil {
			t.Fatalf("after %s: %v", e.After, err)
		}
		if after["remote"] != "127.0.0.1" {
			t.Errorf("entry %d: remote %q, want 127.0.0.1", e.ID, after["remote"])
		}
		line := e.Actor + ": " + e.Reason
		if l, ok := after["login"]; ok {
			line += " " + l
		}
		got = append(got, line)
		for _, b := range [][]byte{[]byte(e.Actor), []byte(e.Reason), e.After, e.Before} {
			if bytes.Contains(b, []byte("Secret-guess")) || bytes.Contains(b, []byte("long password")) {
				t.Errorf("entry %d holds a password: %s %s %s", e.ID, e.Actor, e.Reason, e.After)
			}
		}
	}
	want := []string{ // newest first
		"alice: wrong password",
		"alice: too many attempts",
		"alice: wrong password",
		`(not a login): unknown account "\u202eecila"`,
		"bob: account disabled",
		"nobody: unknown account",
		"alice: wrong password",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("failed logins in the audit log:\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// TestTokenExpiry checks that API tokens expire: a token past its expiry
// is refused with 401 saying so, token list shows the expiry, /me shows
// the token's, and token create takes a lifetime within bounds.
func TestTokenExpiry(t *testing.T) {
	t.Parallel()
	b := newBundle(t, bundleOpts{})
	tok := newToken(t, b, "robot") // the default lifetime
	if r := b.api(t, tok, "GET", "/api/v1/me", ""); r.status != http.StatusOK {
		t.Fatalf("a new token: %d %s", r.status, r.body)
	}
	// Made 100 days ago, expired 10 days ago.
	if _, err := b.st.Pool.Exec(t.Context(), `UPDATE api_tokens SET created_at = now() - interval '100 days', expires_at = now() - interval '10 days'`); err != nil {
		t.Fatal(err)
	}
	r := b.api(t, tok, "GET", "/api/v1/me", "")
	if e := apiErr(t, r); r.status != http.StatusUnauthorized || !strings.Contains(e.Message, "API token 1 expired at ") ||
		!strings.Contains(e.Message, "make a new one (triage admin token create)") {
		t.Errorf("GET /api/v1/me with an expired token: %d %s, want 401 saying it expired", r.status, r.body)
	}
	if r := b.api(t, tok, "POST", "/api/v1/items/claim-next", ""); r.status != http.StatusUnauthorized {
		t.Errorf("POST with an expired token: %d %s, want 401", r.status, r.body)
	}
	out, err := runAdmin(t, b, "", "token", "list")
	if err != nil || !strings.Contains(out, "EXPIRES") || !regexp.MustCompile(`(?m)^1 .* expired$`).MatchString(out) {
		t.Errorf("token list: %v\n%s\nwant token 1 shown expired", err, out)
	}

	// A lifetime at creation, shown by /me and the list.
	out, err = runAdmin(t, b, "", "token", "create", "-login", "robot", "-name", "short-lived", "-expires-in", "2h")
	if err != nil {
		t.Fatal(err)
	}
	r = b.api(t, apiTokenIn(t, out), "GET", "/api/v1/me", "")
	var me struct {
		Login string
		Token struct {
			ID        int64
			Name      string
			ExpiresAt time.Time `json:"expires_at"`
		}
	}
	if err := json.Unmarshal([]byte(r.body), &me); err != nil || r.status != http.StatusOK {
		t.Fatalf("GET /api/v1/me: %d %s (%v)", r.status, r.body, err)
	}
	if left := time.Until(me.Token.ExpiresAt); me.Token.ID != 2 || me.Token.Name != "short-lived" || left < 110*time.Minute || left > 2*time.Hour {
		t.Errorf("/me token = %+v (expires in %v), want token 2 expiring in 2h", me.Token, left)
	}
	if out, _ := runAdmin(t, b, "", "token", "list"); !regexp.MustCompile(`(?m)^2 .*short-lived .* live$`).MatchString(out) {
		t.Errorf("token list:\n%s\nwant token 2 live", out)
	}
	// The default is 90 days.
	out, err = runAdmin(t, b, "", "token", "create", "-login", "robot", "-name", "default")
	if err != nil {
		t.Fatal(err)
	}
	if want := time.Now().Add(triage.DefaultTokenLifetime).UTC().Format(time.DateOnly); !strings.Contains(out, "expires "+want) {
		t.Errorf("token create without -expires-in: %q, want it to expire on %s", out, want)
	}
	for _, bad := range []string{"0d", "-1d", "400d", "soon", ""} {
		if _, err := runAdmin(t, b, "", "token", "create", "-login", "robot", "-name", "x", "-expires-in", bad); err == nil || !strings.Contains(err.Error(), "-expires-in") {
			t.Errorf("-expires-in %q: %v, want a refusal naming -expires-in", bad, err)
		}
	}
}

package triage_test

import (
	"bytes"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"testing"

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

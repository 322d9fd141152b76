package triage_test

import (
	"net/http"
	"net/url"
	"strings"
	"testing"
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

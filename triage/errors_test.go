package triage

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/extractq/extractq/store"
)

func TestErrorStatus(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		err    error
		status int
		public string
	}{
		{invalidf("bad id %q", "x"), http.StatusBadRequest, `invalid request: bad id "x"`},
		{fmt.Errorf("approve: %w", &store.ItemClaimedError{ItemID: 3, By: "bob", Until: time.Now()}), http.StatusConflict, "item 3 is claimed by bob"},
		{fmt.Errorf("store.X: %w", &store.ItemClosedError{ItemID: 3, Status: "approved"}), http.StatusConflict, "item 3 is already approved"},
		{fmt.Errorf("store.TriageItemGet(9): %w", store.ErrNotFound), http.StatusNotFound, "not found"},
		{&store.CountChangedError{Confirmed: 3, Now: 2}, http.StatusConflict, "3 items were confirmed but 2 match now"},
		{&ValidationError{Msg: "fix it"}, http.StatusUnprocessableEntity, "fix it"},
		{fmt.Errorf("%w: cross-site request", ErrForbidden), http.StatusForbidden, "forbidden: cross-site request"},
		{errors.New("pq: connection refused at 10.0.0.1"), http.StatusInternalServerError, "internal error; it has been logged"},
		{fmt.Errorf("wrapped: %w", context.Canceled), 499, ""},
	} {
		status := statusOf(tc.err)
		if status != tc.status {
			t.Errorf("statusOf(%v) = %d, want %d", tc.err, status, tc.status)
		}
		if tc.public != "" && !strings.HasPrefix(publicMessage(tc.err, status), tc.public) {
			t.Errorf("publicMessage(%v) = %q, want prefix %q", tc.err, publicMessage(tc.err, status), tc.public)
		}
	}
	if !errors.Is(&ValidationError{}, ErrUnprocessable) {
		t.Error("ValidationError does not match ErrUnprocessable")
	}
}

func TestFilterAndHosts(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	f, err := parseFilter(map[string][]string{"status": {"mine"}, "age": {">24h"}, "path": {"/items/*/sku"}, "schema": {"a"}, "kind": {"rule"}}, []string{"a", "b"})
	if err != nil {
		t.Fatal(err)
	}
	sf := f.Store("alice", now)
	if sf.Status != store.TriageOpen || sf.ClaimedBy != "alice" || !sf.OlderThan.Equal(now.Add(-24*time.Hour)) || !sf.NewerThan.IsZero() {
		t.Errorf("store filter = %+v", sf)
	}
	if q := f.Query(); q != "age=%3E24h&kind=rule&path=%2Fitems%2F%2A%2Fsku&schema=a&status=mine" {
		t.Errorf("query = %q", q)
	}
	for _, bad := range []map[string][]string{{"status": {"x"}}, {"path": {"order_id"}}, {"age": {"3h"}}, {"sort": {"up"}},
		{"schema": {"nosuch"}}, {"kind": {"bogus"}}, {"status": {"Open"}}} {
		if _, err := parseFilter(bad, []string{"a"}); err == nil {
			t.Errorf("parseFilter(%v): no error", bad)
		}
	}
	// The queue page's reading keeps what it can and says what it left out.
	f, problems := readFilter(map[string][]string{"kind": {"bogus"}, "schema": {"a"}, "sort": {"oldest"}, "status": {"open"},
		"age": {"3h"}, "batch": {strings.Repeat("x", 501)}}, []string{"a", "b"})
	if f != (Filter{Schema: "a"}) || len(problems) != 3 || !strings.HasPrefix(problems[0], `kind "bogus": want one of parse, `) ||
		problems[1] != "batch: value longer than 500 bytes" || !strings.HasPrefix(problems[2], `age "3h": want 1h, `) {
		t.Errorf("readFilter = %+v, %q", f, problems)
	}
	// So is a value that is not text (Postgres could not look it up).
	f, problems = readFilter(map[string][]string{"batch": {"b\x00"}, "path": {"/\xff"}, "kind": {"rule"}}, nil)
	if f != (Filter{Kind: "rule"}) || len(problems) != 2 || problems[0] != `path "/\xff": the value is not UTF-8 text` ||
		problems[1] != `batch "b\x00": the value holds a NUL byte` {
		t.Errorf("readFilter of values that are not text = %+v, %q", f, problems)
	}
	for v, want := range map[string]string{"": "", "é ok\u2028": "", "\x00": "the value holds a NUL byte",
		"\xff": "the value is not UTF-8 text", "\xc0\x80": "the value is not UTF-8 text", // an overlong NUL
		"\xed\xa0\x80": "the value is not UTF-8 text", // a surrogate
		"a\x00\xff":    "the value is not UTF-8 text"} {
		if got := whyNotText(v); got != want {
			t.Errorf("whyNotText(%q) = %q, want %q", v, got, want)
		}
	}
	_, err = parseFilter(map[string][]string{"kind": {"bogus"}, "schema": {strings.Repeat("é", 100)}}, []string{"a"})
	if err == nil || !strings.Contains(err.Error(), `schema "`+strings.Repeat("é", 80)+`…" is not configured here: want one of a; kind "bogus": `) {
		t.Errorf("parseFilter of two bad values: %v", err)
	}
	for host, want := range map[string]bool{"localhost:8080": true, "127.0.0.1": true, "[::1]:80": true, "127.9.9.9:1": true,
		"evil.example": false, "10.0.0.1:8080": false, "localhost.evil.example": false} {
		if isLoopbackHost(host) != want {
			t.Errorf("isLoopbackHost(%q) != %v", host, want)
		}
	}
	for addr, want := range map[string]string{":8080": "127.0.0.1:8080", "0.0.0.0:9000": "127.0.0.1:9000", "localhost:8080": "localhost:8080", "[::1]:80": "[::1]:80"} {
		if got := loopbackAddr(addr); got != want {
			t.Errorf("loopbackAddr(%q) = %q, want %q", addr, got, want)
		}
	}
	for next, want := range map[string]string{"/items/3?x=1": "/items/3?x=1", "//evil.example": "/", "https://evil.example": "/", "/\\evil": "/", "": "/"} {
		if got := safeNext(next); got != want {
			t.Errorf("safeNext(%q) = %q, want %q", next, got, want)
		}
	}
}

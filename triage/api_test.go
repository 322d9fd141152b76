package triage_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/extractq/extractq/store"
	"github.com/extractq/extractq/triage"
)

// newToken makes a reviewer with an API token through the admin command
// and returns the token.
func newToken(t *testing.T, b *bundle, login string) string {
	t.Helper()
	ctx := context.Background()
	var out bytes.Buffer
	aio := triage.AdminIO{In: strings.NewReader("a long enough password\n"), Out: &out, Actor: "admin:test", BcryptCost: 4}
	if err := triage.Admin(ctx, b.st, []string{"add-reviewer", "-login", login, "-password-stdin"}, aio); err != nil {
		t.Fatal(err)
	}
	if err := triage.Admin(ctx, b.st, []string{"token", "create", "-login", login, "-name", "ci"}, aio); err != nil {
		t.Fatal(err)
	}
	tok := regexp.MustCompile(`eqt_[A-Za-z0-9_-]{43}`).FindString(out.String())
	if tok == "" {
		t.Fatalf("no token in %q", out.String())
	}
	return tok
}

func TestAPI(t *testing.T) {
	t.Parallel()

	t.Run("TokenFlow", func(t *testing.T) {
		t.Parallel()
		ctx := context.Background()
		b := newBundle(t, bundleOpts{stream: true})
		tok := newToken(t, b, "robot")
		id, msgID := b.failedItem(t, "customer_message", albertText, albertFirst, albertRepair)
		id2, _ := b.failedItem(t, "customer_message", albertText+"\nx", albertFirst)

		if r := b.api(t, "", "GET", "/api/v1/items", ""); r.status != http.StatusUnauthorized || !strings.Contains(r.body, `"code":"unauthenticated"`) {
			t.Errorf("no token: %d %s", r.status, r.body)
		}
		if r := b.api(t, "eqt_nope", "GET", "/api/v1/items", ""); r.status != http.StatusUnauthorized {
			t.Errorf("bad token: %d", r.status)
		}
		r := b.api(t, tok, "GET", "/api/v1/me", "")
		if r.status != http.StatusOK || !strings.Contains(r.body, `"login":"robot"`) {
			t.Fatalf("me: %d %s", r.status, r.body)
		}
		r = b.api(t, tok, "GET", "/api/v1/items?kind=rule&limit=10", "")
		var list struct {
			Total int
			Items []struct {
				ID     int64
				Errors []struct{ Kind, Path string }
			}
		}
		if err := json.Unmarshal([]byte(r.body), &list); err != nil || list.Total != 2 || list.Items[0].ID != id || list.Items[0].Errors[0].Path != "/order_id" {
			t.Fatalf("items = %s, %v", r.body, err)
		}
		r = b.api(t, tok, "GET", fmt.Sprintf("/api/v1/items/%d", id), "")
		var item struct {
			Message struct{ Text string }
			Calls   []struct {
				Attempt          int
				CompletionTokens int     `json:"completion_tokens"`
				CostUSD          float64 `json:"cost_usd"`
			}
			Draft       map[string]any
			DraftErrors []struct{ Path, Keyword string } `json:"draft_errors"`
			Evidence    []struct{ Path string }
		}
		if err := json.Unmarshal([]byte(r.body), &item); err != nil || item.Message.Text != albertText || len(item.Calls) != 2 ||
			item.Calls[1].CostUSD == 0 || item.Draft["refund_amount"] != "20" || len(item.DraftErrors) != 1 || len(item.Evidence) < 2 {
			t.Fatalf("item = %s, %v", r.body, err)
		}

		r = b.api(t, tok, "POST", "/api/v1/items/claim-next?kind=rule", "")
		if r.status != http.StatusOK || !strings.Contains(r.body, fmt.Sprintf(`"item_id":%d`, id)) {
			t.Fatalf("claim next: %d %s", r.status, r.body)
		}
		fixed := strings.Replace(albertRepair, "7149958241", "7149958247", 1)
		r = b.api(t, tok, "POST", fmt.Sprintf("/api/v1/items/%d/validate", id), `{"record":`+albertRepair+`}`)
		if !strings.Contains(r.body, `"valid":false`) || !strings.Contains(r.body, `"overridable":true`) {
			t.Errorf("validate: %s", r.body)
		}
		r = b.api(t, tok, "POST", fmt.Sprintf("/api/v1/items/%d/approve", id), `{"record":{"intent":"nope"}}`)
		if r.status != http.StatusUnprocessableEntity || !strings.Contains(r.body, `"errors":[`) {
			t.Errorf("approve invalid: %d %s", r.status, r.body)
		}
		r = b.api(t, tok, "POST", fmt.Sprintf("/api/v1/items/%d/approve", id), `{"record":`+fixed+`}`)
		if r.status != http.StatusOK || !strings.Contains(r.body, `"decided_by":"robot"`) {
			t.Fatalf("approve: %d %s", r.status, r.body)
		}
		r = b.api(t, tok, "GET", fmt.Sprintf("/api/v1/messages/%d/result", msgID), "")
		if r.status != http.StatusOK || !strings.Contains(r.body, `"human_made":true`) || !strings.Contains(r.body, `"created_by":"robot"`) {
			t.Errorf("result: %d %s", r.status, r.body)
		}
		if r := b.api(t, tok, "POST", fmt.Sprintf("/api/v1/items/%d/reject", id), `{"reason":"x"}`); r.status != http.StatusConflict {
			t.Errorf("reject after approve: %d %s", r.status, r.body)
		}
		if r := b.api(t, tok, "POST", fmt.Sprintf("/api/v1/items/%d/reject", id2), `{"reason":"x","extra":1}`); r.status != http.StatusBadRequest {
			t.Errorf("unknown field: %d", r.status)
		}
		r = b.api(t, tok, "POST", fmt.Sprintf("/api/v1/items/%d/rerun", id2), `{"note":"new prompt"}`)
		if r.status != http.StatusOK || !strings.Contains(r.body, `"published":true`) || !strings.Contains(r.body, `"run_no":2`) {
			t.Errorf("rerun: %d %s", r.status, r.body)
		}
		r = b.api(t, tok, "GET", fmt.Sprintf("/api/v1/audit?item_id=%d", id), "")
		if !strings.Contains(r.body, `"action":"approve"`) || !strings.Contains(r.body, `"via":"api"`) {
			t.Errorf("audit: %s", r.body)
		}
		if r := b.api(t, tok, "GET", "/api/v1/nope", ""); r.status != http.StatusNotFound {
			t.Errorf("unknown route: %d", r.status)
		}

		// Bulk: count, then confirm.
		b.failedItem(t, "customer_message", albertText+"\ny", albertFirst, albertRepair)
		r = b.api(t, tok, "GET", "/api/v1/rerun/count?schema=customer_message", "")
		if !strings.Contains(r.body, `"count":1`) {
			t.Fatalf("bulk count: %s", r.body)
		}
		if r := b.api(t, tok, "POST", "/api/v1/rerun?schema=customer_message", `{"confirmed":2}`); r.status != http.StatusConflict {
			t.Errorf("bulk wrong count: %d %s", r.status, r.body)
		}
		r = b.api(t, tok, "POST", "/api/v1/rerun?schema=customer_message", `{"confirmed":1,"note":"schema v2"}`)
		if r.status != http.StatusOK || !strings.Contains(r.body, `"runs":1`) || !strings.Contains(r.body, `"published":1`) {
			t.Errorf("bulk: %d %s", r.status, r.body)
		}

		// Revoked: refused.
		var out bytes.Buffer
		if err := triage.Admin(ctx, b.st, []string{"token", "revoke", "-id", "1"}, triage.AdminIO{Out: &out}); err != nil {
			t.Fatal(err)
		}
		if r := b.api(t, tok, "GET", "/api/v1/me", ""); r.status != http.StatusUnauthorized {
			t.Errorf("revoked token: %d", r.status)
		}
	})

	t.Run("SessionNeedsCSRF", func(t *testing.T) {
		t.Parallel()
		b := newBundle(t, bundleOpts{})
		b.reviewer(t, "alice", "correct horse battery")
		c := b.client(t)
		c.login("alice", "correct horse battery")
		id, _ := b.failedItem(t, "customer_message", albertText, albertFirst)
		req, _ := http.NewRequest(http.MethodPost, b.ts.URL+fmt.Sprintf("/api/v1/items/%d/claim", id), nil)
		if r := c.do(req); r.status != http.StatusForbidden {
			t.Errorf("session claim without CSRF: %d", r.status)
		}
		req, _ = http.NewRequest(http.MethodPost, b.ts.URL+fmt.Sprintf("/api/v1/items/%d/claim", id), nil)
		req.Header.Set("X-CSRF-Token", c.csrf)
		if r := c.do(req); r.status != http.StatusOK || !strings.Contains(r.body, `"claimed_by":"alice"`) {
			t.Errorf("session claim: %d %s", r.status, r.body)
		}
	})
}

func TestLiveUpdates(t *testing.T) {
	t.Parallel()
	b := newBundle(t, bundleOpts{})
	b.reviewer(t, "alice", "correct horse battery")
	c := b.client(t)
	c.login("alice", "correct horse battery")

	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, b.ts.URL+"/events", nil)
	resp, err := c.http.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if ct := resp.Header.Get("Content-Type"); ct != "text/event-stream" {
		t.Fatalf("content type %q", ct)
	}
	events := make(chan string, 8)
	go func() {
		sc := bufio.NewScanner(resp.Body)
		for sc.Scan() {
			if v, ok := strings.CutPrefix(sc.Text(), "data: "); ok {
				events <- v
			}
		}
		close(events)
	}()
	first := <-events // the version when the stream opened
	b.failedItem(t, "customer_message", albertText, albertFirst)
	select {
	case v := <-events:
		if v == first {
			t.Errorf("event with the same version %q", v)
		}
	case <-ctx.Done():
		t.Fatal("no event after a new item")
	}
	// The live fragment now lists it.
	if r := c.get("/queue/live"); !strings.Contains(r.body, `<strong id="total">1</strong>`) {
		t.Error("live fragment does not count the new item")
	}
}

func TestAdmin(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := newBundle(t, bundleOpts{})
	run := func(stdin string, args ...string) (string, error) {
		var out bytes.Buffer
		err := triage.Admin(ctx, b.st, args, triage.AdminIO{In: strings.NewReader(stdin), Out: &out, Actor: "admin:test", BcryptCost: 4})
		return out.String(), err
	}
	if _, err := run("short\n", "add-reviewer", "-login", "carol", "-password-stdin"); err == nil {
		t.Error("short password accepted")
	}
	if _, err := run("a long enough password\n", "add-reviewer", "-login", "Carol", "-password-stdin"); err == nil {
		t.Error("upper-case login accepted")
	}
	if _, err := run("", "add-reviewer", "-login", "carol"); err == nil || !strings.Contains(err.Error(), "-password-stdin") {
		t.Errorf("no terminal: %v", err)
	}
	if out, err := run("a long enough password\n", "add-reviewer", "-login", "carol", "-name", "Carol C", "-password-stdin"); err != nil || !strings.Contains(out, "reviewer carol created") {
		t.Fatalf("add: %q %v", out, err)
	}
	if _, err := run("a long enough password\n", "add-reviewer", "-login", "carol", "-password-stdin"); err == nil || !strings.Contains(err.Error(), "exists") {
		t.Errorf("duplicate: %v", err)
	}
	rv, err := b.st.ReviewerGetByLogin(ctx, b.st.Pool, "carol")
	if err != nil || !strings.HasPrefix(rv.PasswordHash, "$2a$") || strings.Contains(rv.PasswordHash, "enough") {
		t.Fatalf("stored hash %q, %v", rv.PasswordHash, err)
	}
	if _, err := run("another long password\n", "set-password", "-login", "carol", "-password-stdin"); err != nil {
		t.Fatal(err)
	}
	c := b.client(t)
	if r := c.login("carol", "another long password"); r.status != http.StatusSeeOther {
		t.Errorf("login with the new password: %d", r.status)
	}
	if _, err := run("", "disable", "-login", "carol"); err != nil {
		t.Fatal(err)
	}
	if out, err := run("", "list"); err != nil || !strings.Contains(out, "disabled") {
		t.Errorf("list: %q %v", out, err)
	}
	if _, err := run("", "enable", "-login", "carol"); err != nil {
		t.Fatal(err)
	}
	if out, err := run("", "token", "create", "-login", "carol", "-name", "nightly"); err != nil || !strings.Contains(out, "eqt_") {
		t.Fatalf("token: %q %v", out, err)
	}
	if out, err := run("", "token", "list"); err != nil || !strings.Contains(out, "nightly") || strings.Contains(out, "eqt_") {
		t.Errorf("token list: %q %v", out, err)
	}
	if _, err := run("", "token", "revoke", "-id", "999"); err == nil {
		t.Error("revoke unknown token")
	}
	if _, err := run("", "bogus"); err == nil {
		t.Error("unknown command")
	}
	entries, _ := b.st.AuditList(ctx, b.st.Pool, store.AuditListParams{Actor: "admin:test"})
	if len(entries) != 5 || entries[0].Via != store.ViaCLI || entries[0].Action != store.AuditTokenCreate {
		t.Errorf("admin audit: %d entries", len(entries))
	}
}

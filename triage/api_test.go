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

	"github.com/prometheus/client_golang/prometheus"

	"github.com/extractq/extractq/store"
	"github.com/extractq/extractq/triage"
)

// apiErr decodes an API error body, failing the test if it is not one.
func apiErr(t *testing.T, r response) struct{ Code, Message string } {
	t.Helper()
	var e struct {
		Error struct{ Code, Message string }
	}
	if err := json.Unmarshal([]byte(r.body), &e); err != nil || e.Error.Code == "" {
		t.Errorf("not an API error: %d %s (%v)", r.status, r.body, err)
	}
	return e.Error
}

// newToken makes an admin account with an API token through the admin
// command and returns the token.
func newToken(t *testing.T, b *bundle, login string) string {
	t.Helper()
	return newRoleToken(t, b, login, "admin", "")
}

// newRoleToken makes an account of role accountRole with an API token of
// tokenRole ("" for the account's) through the admin command and returns
// the token.
func newRoleToken(t *testing.T, b *bundle, login, accountRole, tokenRole string) string {
	t.Helper()
	ctx := context.Background()
	var out bytes.Buffer
	aio := triage.AdminIO{In: strings.NewReader("a long enough password\n"), Out: &out, Actor: "admin:test", BcryptCost: 4}
	if err := triage.Admin(ctx, b.st, []string{"add-reviewer", "-login", login, "-role", accountRole, "-password-stdin"}, aio); err != nil {
		t.Fatal(err)
	}
	args := []string{"token", "create", "-login", login, "-name", "ci"}
	if tokenRole != "" {
		args = append(args, "-role", tokenRole)
	}
	if err := triage.Admin(ctx, b.st, args, aio); err != nil {
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
		var refused struct {
			Error struct {
				Code, Message string
				Errors        []struct{ Path, Message string }
			}
		}
		if err := json.Unmarshal([]byte(r.body), &refused); err != nil || r.status != http.StatusUnprocessableEntity ||
			refused.Error.Code != "unprocessable" || len(refused.Error.Errors) == 0 {
			t.Errorf("approve invalid: %d %s", r.status, r.body)
		}
		// The message is the API's: the schema and the errors, not the
		// page's "beside the fields".
		msg := refused.Error.Message
		if !strings.HasPrefix(msg, "the record does not pass schema customer_message: ") || strings.Contains(msg, "beside the fields") ||
			!strings.Contains(msg, refused.Error.Errors[0].Path+": "+refused.Error.Errors[0].Message) {
			t.Errorf("approve invalid: message %q", msg)
		}
		r = b.api(t, tok, "POST", fmt.Sprintf("/api/v1/items/%d/approve", id), `{"record":`+albertRepair+`}`)
		if r.status != http.StatusUnprocessableEntity || !strings.Contains(r.body, `"overridable":true`) ||
			!strings.Contains(r.body, "only grounding errors remain (/order_id: ") || !strings.Contains(r.body, "send override_reason") {
			t.Errorf("approve with grounding errors: %d %s", r.status, r.body)
		}
		r = b.api(t, tok, "POST", fmt.Sprintf("/api/v1/items/%d/approve", id), `{"record":`+fixed+`}`)
		if r.status != http.StatusOK || !strings.Contains(r.body, `"decided_by":"robot"`) {
			t.Fatalf("approve: %d %s", r.status, r.body)
		}
		r = b.api(t, tok, "GET", fmt.Sprintf("/api/v1/messages/%d/result", msgID), "")
		if r.status != http.StatusOK || !strings.Contains(r.body, `"human_made":true`) || !strings.Contains(r.body, `"created_by":"robot"`) {
			t.Errorf("result: %d %s", r.status, r.body)
		}
		var res struct {
			SchemaID string `json:"schema_id"`
		}
		if err := json.Unmarshal([]byte(r.body), &res); err != nil || res.SchemaID == "" {
			t.Fatalf("result has no schema_id: %v %s", err, r.body)
		}
		if r := b.api(t, tok, "GET", fmt.Sprintf("/api/v1/messages/%d/result?schema=%s", msgID, res.SchemaID), ""); r.status != http.StatusOK || !strings.Contains(r.body, `"human_made":true`) {
			t.Errorf("result of its schema: %d %s", r.status, r.body)
		}
		// A schema not configured is a bad request, as for /items; a
		// configured one the message has no result of is not found.
		r = b.api(t, tok, "GET", fmt.Sprintf("/api/v1/messages/%d/result?schema=no_such_schema", msgID), "")
		if e := apiErr(t, r); r.status != http.StatusBadRequest || e.Code != "invalid" ||
			e.Message != `invalid request: schema "no_such_schema" is not configured here: want one of customer_message, return_request` {
			t.Errorf("result of a schema not configured: %d %s", r.status, r.body)
		}
		r = b.api(t, tok, "GET", fmt.Sprintf("/api/v1/messages/%d/result?schema=return_request", msgID), "")
		if e := apiErr(t, r); r.status != http.StatusNotFound || e.Code != "not_found" ||
			!strings.Contains(e.Message, fmt.Sprintf(`message %d has no result of schema "return_request"`, msgID)) {
			t.Errorf("result of a configured schema it has none of: %d %s", r.status, r.body)
		}
		if r := b.api(t, tok, "GET", "/api/v1/messages/999999/result?schema=customer_message", ""); r.status != http.StatusNotFound {
			t.Errorf("result of an unknown message: %d %s", r.status, r.body)
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
		// Over the most one bulk re-run takes: the client's to fix, not a 500.
		if r := b.api(t, tok, "POST", "/api/v1/rerun?schema=customer_message", fmt.Sprintf(`{"confirmed":%d}`, store.MaxBulkRerun+1)); r.status != http.StatusBadRequest ||
			!strings.Contains(r.body, `"code":"invalid"`) || !strings.Contains(r.body, "narrow the filter") {
			t.Errorf("bulk over the limit: %d %s, want 400 invalid", r.status, r.body)
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

	t.Run("UnknownFilterValues", func(t *testing.T) {
		t.Parallel()
		b := newBundle(t, bundleOpts{})
		tok := newToken(t, b, "robot")
		b.failedItem(t, "customer_message", albertText, albertFirst, albertRepair)
		kinds := "want one of parse, schema, rule, tool, truncated, refusal, patch_invalid, budget, input, transport, delivery"
		for _, tc := range []struct{ method, path, want string }{
			{"GET", "/api/v1/items?schema=nosuch", `schema "nosuch" is not configured here: want one of customer_message, return_request`},
			{"GET", "/api/v1/items?kind=bogus", `kind "bogus": ` + kinds},
			{"GET", "/api/v1/items?status=closed", `status "closed": want one of open, mine, approved, rejected, rerun, any`},
			{"GET", "/api/v1/items?path=order_id", `path "order_id": want a JSON Pointer`},
			{"GET", "/api/v1/items/counts?kind=bogus", `kind "bogus": `},
			{"POST", "/api/v1/items/claim-next?schema=nosuch", `schema "nosuch" is not configured here`},
			{"GET", "/api/v1/rerun/count?schema=nosuch", `schema "nosuch" is not configured here`},
			{"GET", "/api/v1/rerun/count?schema=customer_message&kind=bogus", `kind "bogus": `},
			{"POST", "/api/v1/rerun?schema=nosuch", `schema "nosuch" is not configured here`},
		} {
			r := b.api(t, tok, tc.method, tc.path, "")
			var e struct {
				Error struct{ Code, Message string }
			}
			if err := json.Unmarshal([]byte(r.body), &e); err != nil || r.status != http.StatusBadRequest ||
				e.Error.Code != "invalid" || !strings.Contains(e.Error.Message, tc.want) {
				t.Errorf("%s %s: %d %s, want 400 with %q", tc.method, tc.path, r.status, r.body, tc.want)
			}
		}
		// Known values still filter: an empty list is an empty queue.
		for _, path := range []string{"/api/v1/items?schema=return_request", "/api/v1/items?kind=budget&status=any"} {
			if r := b.api(t, tok, "GET", path, ""); r.status != http.StatusOK || !strings.Contains(r.body, `"total":0`) {
				t.Errorf("%s: %d %s", path, r.status, r.body)
			}
		}
	})

	t.Run("UnknownParameters", func(t *testing.T) {
		t.Parallel()
		b := newBundle(t, bundleOpts{})
		tok := newToken(t, b, "robot")
		id, msgID := b.failedItem(t, "customer_message", albertText, albertFirst, albertRepair)
		filter := "status, schema, kind, path, batch, age, sort, q, prompt_version, schema_version, model"
		for _, tc := range []struct{ method, path, want string }{
			{"GET", "/api/v1/items?order=weird", `unknown parameter "order": GET /api/v1/items takes ` + filter + ", limit, offset"},
			{"GET", "/api/v1/items?statuss=open", `unknown parameter "statuss": GET /api/v1/items takes ` + filter + ", limit, offset"},
			{"GET", "/api/v1/items?statuss=open&order=weird&kind=rule", `unknown parameters "order", "statuss": GET /api/v1/items takes `},
			{"GET", "/api/v1/items?sort=weird", `sort "weird": want newest or oldest (the default)`},
			{"GET", "/api/v1/items?schema=customer_message&schema=return_request", `parameter "schema" given more than once: GET /api/v1/items takes each parameter once`},
			{"GET", "/api/v1/items?kind=%zz", "GET /api/v1/items: the query string does not parse"},
			{"GET", "/api/v1/items/counts?limit=5", `unknown parameter "limit": GET /api/v1/items/counts takes ` + filter},
			{"POST", "/api/v1/items/claim-next?offset=1", `unknown parameter "offset": POST /api/v1/items/claim-next takes ` + filter + ", after"},
			{"POST", "/api/v1/items/claim-next?after=first", `after "first": want an item id`},
			{"POST", "/api/v1/items/claim-next?status=approved", `status "approved": claim-next claims open items only`},
			{"POST", "/api/v1/items/claim-next?status=mine", `status "mine": claim-next claims open items only`},
			{"POST", "/api/v1/items/claim-next?sort=newest", `sort "newest": claim-next claims the oldest open item first`},
			{"GET", "/api/v1/me?verbose=1", `unknown parameter "verbose": GET /api/v1/me takes no query parameters`},
			{"GET", fmt.Sprintf("/api/v1/items/%d?fields=all", id), fmt.Sprintf(`unknown parameter "fields": GET /api/v1/items/%d takes no query parameters`, id)},
			{"POST", fmt.Sprintf("/api/v1/items/%d/approve?override_reason=checked", id), `unknown parameter "override_reason": POST /api/v1/items/`},
			{"POST", fmt.Sprintf("/api/v1/items/%d/claim?lease=1h", id), `unknown parameter "lease"`},
			{"GET", "/api/v1/rerun/count?schema=customer_message&dry=1", `unknown parameter "dry": GET /api/v1/rerun/count takes ` + filter},
			{"POST", "/api/v1/rerun?schema=customer_message&dry=1", `unknown parameter "dry": POST /api/v1/rerun takes ` + filter},
			{"GET", fmt.Sprintf("/api/v1/messages/%d/result?schema_id=customer_message", msgID), `unknown parameter "schema_id": GET /api/v1/messages/` + fmt.Sprint(msgID) + "/result takes schema"},
			{"GET", "/api/v1/audit?item=1", `unknown parameter "item": GET /api/v1/audit takes item_id, actor, limit`},
			{"GET", "/api/v1/audit?item_id=x", `item_id "x": want an item id`},
		} {
			r := b.api(t, tok, tc.method, tc.path, "")
			if e := apiErr(t, r); r.status != http.StatusBadRequest || e.Code != "invalid" || !strings.Contains(e.Message, tc.want) {
				t.Errorf("%s %s: %d %s, want 400 with %q", tc.method, tc.path, r.status, r.body, tc.want)
			}
		}
		// Nothing was claimed by the refused calls.
		if r := b.api(t, tok, "GET", "/api/v1/items?status=mine", ""); !strings.Contains(r.body, `"total":0`) {
			t.Errorf("a refused call claimed: %s", r.body)
		}
		// Without a token the answer is 401 whatever the query.
		if r := b.api(t, "", "GET", "/api/v1/items?order=weird", ""); r.status != http.StatusUnauthorized {
			t.Errorf("no token, unknown parameter: %d", r.status)
		}
		// The parameters each route takes still work.
		for _, tc := range []struct{ method, path, want string }{
			{"GET", "/api/v1/items?status=open&schema=customer_message&kind=rule&path=/order_id&batch=" + b.batch + "&age=24h&sort=newest&limit=5&offset=0", `"total":1`},
			{"GET", "/api/v1/items?sort=oldest", `"total":1`},
			{"GET", "/api/v1/items/counts?kind=rule&sort=newest", `"total":1`},
			{"GET", "/api/v1/rerun/count?schema=customer_message&status=open&kind=rule", `"count":1`},
			{"GET", fmt.Sprintf("/api/v1/audit?item_id=%d&actor=robot&limit=5", id), `"entries":[]`},
			{"POST", fmt.Sprintf("/api/v1/items/claim-next?kind=rule&after=%d", id), ""}, // 404: none after it
			{"POST", "/api/v1/items/claim-next?kind=rule&status=open&sort=oldest", fmt.Sprintf(`"item_id":%d`, id)},
		} {
			r := b.api(t, tok, tc.method, tc.path, "")
			if tc.want == "" {
				if r.status != http.StatusNotFound {
					t.Errorf("%s %s: %d %s, want 404", tc.method, tc.path, r.status, r.body)
				}
				continue
			}
			if r.status != http.StatusOK || !strings.Contains(r.body, tc.want) {
				t.Errorf("%s %s: %d %s, want 200 with %s", tc.method, tc.path, r.status, r.body, tc.want)
			}
		}
	})

	t.Run("OverrideReasonMessages", func(t *testing.T) {
		t.Parallel()
		ctx := context.Background()
		b := newBundle(t, bundleOpts{})
		tok := newToken(t, b, "robot")
		id, msgID := b.failedItem(t, "customer_message", albertText, albertFirst, albertRepair)
		approve := func(reason string) response {
			body := map[string]any{"record": json.RawMessage(albertRepair)} // the invented order id: a grounding error only
			if reason != "-" {
				body["override_reason"] = reason
			}
			j, _ := json.Marshal(body)
			return b.api(t, tok, "POST", fmt.Sprintf("/api/v1/items/%d/approve", id), string(j))
		}
		required := "override_reason: it is required for overriding grounding errors (at least 5 characters)"
		for _, tc := range []struct{ reason, want, not string }{
			{"-", required, "too short"},
			{"", required, "too short"},
			{"   ", required, "too short"},
			{"ok", "override_reason is too short: 2 characters given, at least 5 needed", "required"},
			{"é", "override_reason is too short: 1 character given, at least 5 needed", "required"},
			{" née ", "override_reason is too short: 3 characters given, at least 5 needed", "required"},
		} {
			r := approve(tc.reason)
			var e struct {
				Error struct {
					Code, Message string
					Overridable   bool
				}
			}
			if err := json.Unmarshal([]byte(r.body), &e); err != nil || r.status != http.StatusUnprocessableEntity || e.Error.Code != "unprocessable" ||
				!e.Error.Overridable || !strings.HasPrefix(e.Error.Message, "only grounding errors remain (/order_id: ") ||
				!strings.Contains(e.Error.Message, tc.want) || strings.Contains(e.Error.Message, tc.not) {
				t.Errorf("approve with override_reason %q: %d %s, want 422 with %q", tc.reason, r.status, r.body, tc.want)
			}
		}
		if r := approve("the customer confirmed the order id by phone"); r.status != http.StatusOK {
			t.Fatalf("approve with a reason: %d %s", r.status, r.body)
		}
		cur, err := b.st.CurrentResultGet(ctx, b.st.Pool, store.CurrentResultGetParams{MessageID: msgID})
		if err != nil || !strings.Contains(string(cur.Data), "7149958241") || cur.CreatedBy != "robot" {
			t.Errorf("result = %s by %q, %v", cur.Data, cur.CreatedBy, err)
		}
	})

	t.Run("BulkCountAndRerunTakeTheSameFilter", func(t *testing.T) {
		t.Parallel()
		b := newBundle(t, bundleOpts{})
		tok := newToken(t, b, "robot")
		b.failedItem(t, "customer_message", albertText, albertFirst, albertRepair)
		for _, tc := range []struct{ query, want string }{
			{"", "invalid request: schema is required: a bulk re-run extracts with one schema; want one of customer_message, return_request"},
			{"?kind=rule", "invalid request: schema is required: a bulk re-run extracts with one schema; want one of customer_message, return_request"},
			{"?schema=customer_message&status=approved", `invalid request: status "approved": a bulk re-run takes open items only; want open or leave it out`},
			{"?schema=customer_message&status=mine", `invalid request: status "mine": a bulk re-run takes every open item of the filter that nobody else holds, not only yours; want open or leave it out`},
			{"?schema=nosuch", `invalid request: schema "nosuch" is not configured here: want one of customer_message, return_request`},
			{"?schema=customer_message&sort=up", `invalid request: sort "up": want newest or oldest (the default)`},
			{"?schema=customer_message&order=weird", `invalid request: unknown parameter "order": `},
		} {
			count := b.api(t, tok, "GET", "/api/v1/rerun/count"+tc.query, "")
			ce := apiErr(t, count)
			for _, body := range []string{`{"confirmed":1}`, ""} {
				run := b.api(t, tok, "POST", "/api/v1/rerun"+tc.query, body)
				re := apiErr(t, run)
				if count.status != http.StatusBadRequest || run.status != http.StatusBadRequest || ce.Code != "invalid" || re.Code != "invalid" ||
					!strings.HasPrefix(ce.Message, tc.want) || !strings.HasPrefix(re.Message, tc.want) {
					t.Errorf("filter %q, body %q: count %d %q, rerun %d %q; want both 400 with %q", tc.query, body, count.status, ce.Message, run.status, re.Message, tc.want)
				}
				if strings.Contains(tc.query, "order=") {
					continue // the route is named in the message, and differs
				}
				if ce.Message != re.Message {
					t.Errorf("filter %q: count says %q, rerun says %q", tc.query, ce.Message, re.Message)
				}
			}
		}
		// With the same good filter both work, and nothing was re-run by
		// the refused calls.
		r := b.api(t, tok, "GET", "/api/v1/rerun/count?schema=customer_message&status=open", "")
		if r.status != http.StatusOK || !strings.Contains(r.body, `"count":1`) {
			t.Fatalf("count: %d %s", r.status, r.body)
		}
		r = b.api(t, tok, "POST", "/api/v1/rerun?schema=customer_message&status=open", `{"confirmed":1}`)
		if r.status != http.StatusOK || !strings.Contains(r.body, `"runs":1`) {
			t.Errorf("rerun: %d %s", r.status, r.body)
		}
	})

	t.Run("BodyErrorsNameTheProblem", func(t *testing.T) {
		t.Parallel()
		b := newBundle(t, bundleOpts{})
		tok := newToken(t, b, "robot")
		id, _ := b.failedItem(t, "customer_message", albertText, albertFirst, albertRepair)
		item := fmt.Sprintf("/api/v1/items/%d", id)
		// A misspelt field is named, with the fields the route takes.
		for _, tc := range []struct{ path, body, want string }{
			{item + "/approve", `{"recrd":{}}`, `body: unknown field "recrd": POST ` + item + `/approve takes record, override_reason`},
			{item + "/validate", `{"record":{},"overide_reason":"x"}`, `body: unknown field "overide_reason": POST ` + item + `/validate takes record, override_reason`},
			{item + "/reject", `{"reson":"spam"}`, `body: unknown field "reson": POST ` + item + `/reject takes reason`},
			{item + "/rerun", `{"notes":"v2"}`, `body: unknown field "notes": POST ` + item + `/rerun takes note`},
			{"/api/v1/rerun?schema=customer_message", `{"confirm":1}`, `body: unknown field "confirm": POST /api/v1/rerun takes confirmed, note`},
		} {
			r := b.api(t, tok, "POST", tc.path, tc.body)
			if e := apiErr(t, r); r.status != http.StatusBadRequest || e.Code != "invalid" || !strings.Contains(e.Message, tc.want) {
				t.Errorf("POST %s %s: %d %s, want 400 with %q", tc.path, tc.body, r.status, r.body, tc.want)
			}
		}
		// A bulk re-run of a filter nothing matches says so, and names the
		// filter, whatever the confirmation.
		for _, body := range []string{`{"confirmed":0}`, `{}`, ""} {
			r := b.api(t, tok, "POST", "/api/v1/rerun?schema=return_request&path=/order_id", body)
			want := `nothing to re-run: no open item that nobody else holds matches the filter schema "return_request", path "/order_id"`
			if e := apiErr(t, r); r.status != http.StatusNotFound || e.Code != "not_found" || !strings.Contains(e.Message, want) {
				t.Errorf("bulk re-run of nothing, body %q: %d %s, want 404 with %q", body, r.status, r.body, want)
			}
		}
		// A filter that matches still asks for the count.
		r := b.api(t, tok, "POST", "/api/v1/rerun?schema=customer_message", `{"confirmed":0}`)
		if e := apiErr(t, r); r.status != http.StatusBadRequest || !strings.Contains(e.Message, `want {"confirmed": N} with N from GET /api/v1/rerun/count`) {
			t.Errorf("bulk re-run unconfirmed: %d %s", r.status, r.body)
		}
	})

	t.Run("SessionNeedsCSRF", func(t *testing.T) {
		t.Parallel()
		b, c := newAliceBundle(t)
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
	// With metrics, so the stream goes through their handler middleware.
	b := newBundle(t, bundleOpts{registry: prometheus.NewRegistry()})
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
	// carol, the first account, is an admin: another one lets her be
	// disabled (the last enabled admin cannot be: TestAdminKeepsAnAdmin).
	b.reviewer(t, "dave", "a long enough password")
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
	if _, err := run("", "token", "list", "-login", "nobody"); err == nil || !strings.Contains(err.Error(), `no reviewer "nobody"`) {
		t.Errorf("token list of an unknown login: %v", err)
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

// TestAdminRoles checks the roles of the admin command: the first account
// is an admin, the next a reviewer unless -role says otherwise; set-role
// changes a role (audited) and revokes the tokens it no longer covers;
// token create refuses a role wider than the account's.
func TestAdminRoles(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := newBundle(t, bundleOpts{})
	run := func(stdin string, args ...string) (string, error) {
		var out bytes.Buffer
		err := triage.Admin(ctx, b.st, args, triage.AdminIO{In: strings.NewReader(stdin), Out: &out, Actor: "admin:test", BcryptCost: 4})
		return out.String(), err
	}
	const pw = "a long enough password\n"
	if out, err := run(pw, "add-reviewer", "-login", "first", "-password-stdin"); err != nil || !strings.Contains(out, "role admin") {
		t.Fatalf("first account: %q %v, want an admin", out, err)
	}
	if out, err := run(pw, "add-reviewer", "-login", "second", "-password-stdin"); err != nil || !strings.Contains(out, "role reviewer") {
		t.Fatalf("second account: %q %v, want a reviewer", out, err)
	}
	if out, err := run(pw, "add-reviewer", "-login", "third", "-role", "analyst", "-password-stdin"); err != nil || !strings.Contains(out, "role analyst") {
		t.Fatalf("-role analyst: %q %v", out, err)
	}
	if _, err := run(pw, "add-reviewer", "-login", "fourth", "-role", "ingest", "-password-stdin"); err == nil || !strings.Contains(err.Error(), "want one of admin, reviewer, analyst") {
		t.Errorf("-role ingest for an account: %v", err)
	}
	if _, err := run("", "token", "create", "-login", "second", "-name", "x", "-role", "admin"); err == nil || !strings.Contains(err.Error(), "needs an admin account") {
		t.Errorf("a reviewer's admin token: %v", err)
	}
	if out, err := run("", "token", "create", "-login", "second", "-name", "mine"); err != nil || !strings.Contains(out, "role reviewer") {
		t.Fatalf("a reviewer's token: %q %v", out, err)
	}
	if out, err := run("", "set-role", "-login", "second", "-role", "analyst"); err != nil || !strings.Contains(out, "set to analyst (was reviewer); 1 API token of a wider role revoked") {
		t.Errorf("set-role: %q %v", out, err)
	}
	if out, err := run("", "list"); err != nil || !regexp.MustCompile(`(?m)^second\s+analyst\s`).MatchString(out) {
		t.Errorf("list: %q %v", out, err)
	}
	if _, err := run("", "set-role", "-login", "second", "-role", "root"); err == nil {
		t.Error("set-role root: no error")
	}
	entries, _ := b.st.AuditList(ctx, b.st.Pool, store.AuditListParams{Actor: "admin:test"})
	if len(entries) == 0 || entries[0].Action != store.AuditRoleSet || !strings.Contains(string(entries[0].After), `"role_before": "reviewer"`) &&
		!strings.Contains(string(entries[0].After), `"role_before":"reviewer"`) {
		t.Errorf("set-role audit: %+v", entries)
	}
}

package triage_test

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/extractq/extractq/store"
)

func TestReports(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := newBundle(t, bundleOpts{})
	tok := newToken(t, b, "analyst")
	b.failedItem(t, "customer_message", albertText, albertFirst, albertRepair)
	b.failedItem(t, "customer_message", albertText+"\nps", albertFirst)
	want, err := b.st.FailingFieldList(ctx, b.st.Pool, store.FailingFieldListParams{})
	if err != nil {
		t.Fatal(err)
	}
	if len(want) == 0 {
		t.Fatal("the fixture recorded no failure events")
	}

	t.Run("FailingFieldsAPI", func(t *testing.T) {
		r := b.api(t, tok, "GET", "/api/v1/reports/failing-fields?schema=customer_message", "")
		var got struct {
			Since  *string
			Fields []store.FailingField
		}
		if err := json.Unmarshal([]byte(r.body), &got); err != nil || r.status != http.StatusOK {
			t.Fatalf("%d %s (%v)", r.status, r.body, err)
		}
		if got.Since != nil || len(got.Fields) != len(want) {
			t.Fatalf("since %v, %d fields; want null and %d", got.Since, len(got.Fields), len(want))
		}
		for i := range want {
			g, w := got.Fields[i], want[i]
			if g.PathPattern != w.PathPattern || g.Kind != w.Kind || g.Errors != w.Errors || g.Runs != w.Runs || g.RunsFailed != w.RunsFailed {
				t.Errorf("field %d = %+v, want %+v", i, g, w)
			}
		}
		r = b.api(t, tok, "GET", "/api/v1/reports/failing-fields?since=1h&limit=1", "")
		if err := json.Unmarshal([]byte(r.body), &got); err != nil || got.Since == nil || len(got.Fields) != 1 || got.Fields[0].Errors != want[0].Errors {
			t.Errorf("last hour, limit 1: %d %s", r.status, r.body)
		}
		r = b.api(t, tok, "GET", "/api/v1/reports/failing-fields?since=2999-01-01", "")
		if err := json.Unmarshal([]byte(r.body), &got); err != nil || len(got.Fields) != 0 || !strings.Contains(r.body, `"fields":[]`) {
			t.Errorf("since the future: %d %s", r.status, r.body)
		}
	})

	t.Run("BadParameters", func(t *testing.T) {
		for _, tc := range []struct{ path, want string }{
			{"/api/v1/reports/failing-fields?since=lastweek", `since "lastweek": want a look-back duration such as 7d or 36h`},
			{"/api/v1/reports/failing-fields?since=-7d", `since "-7d": a look-back duration must be positive`},
			{"/api/v1/reports/failing-fields?schema=nosuch", `schema "nosuch" is not configured here: want one of customer_message, return_request`},
			{"/api/v1/reports/failing-fields?limit=0", `limit "0": want 1 to 1000`},
			{"/api/v1/reports/repair?order=errors", `unknown parameter "order"`},
			{"/api/v1/batches?since=7d", `unknown parameter "since"`},
			{"/api/v1/batches?limit=501", `limit "501": want 1 to 500`},
		} {
			r := b.api(t, tok, "GET", tc.path, "")
			if e := apiErr(t, r); r.status != http.StatusBadRequest || e.Code != "invalid" || !strings.Contains(e.Message, tc.want) {
				t.Errorf("%s: %d %q, want 400 with %q", tc.path, r.status, e.Message, tc.want)
			}
		}
		if r := b.api(t, "", "GET", "/api/v1/reports/failing-fields", ""); r.status != http.StatusUnauthorized {
			t.Errorf("no token: %d", r.status)
		}
	})

	t.Run("OfBatch", func(t *testing.T) {
		if err := b.st.BatchInsert(ctx, b.st.Pool, store.BatchInsertParams{ID: "b-clean", SchemaID: "return_request"}); err != nil {
			t.Fatal(err)
		}
		var got struct {
			Batch  *string
			Fields []store.FailingField
		}
		r := b.api(t, tok, "GET", "/api/v1/reports/failing-fields?batch="+b.batch, "")
		if err := json.Unmarshal([]byte(r.body), &got); err != nil || r.status != http.StatusOK || got.Batch == nil || *got.Batch != b.batch ||
			len(got.Fields) != len(want) || got.Fields[0].Errors != want[0].Errors {
			t.Errorf("of the fixture's batch: %d %s", r.status, r.body)
		}
		for _, path := range []string{"/api/v1/reports/failing-fields?batch=b-clean", "/api/v1/reports/repair?batch=b-clean"} {
			r = b.api(t, tok, "GET", path, "")
			if r.status != http.StatusOK || !strings.Contains(r.body, `"batch":"b-clean"`) || !strings.Contains(r.body, `"fields":[]`) {
				t.Errorf("%s (a batch without errors): %d %s", path, r.status, r.body)
			}
		}
		r = b.api(t, tok, "GET", "/api/v1/reports/repair?batch=no-such-batch", "")
		if e := apiErr(t, r); r.status != http.StatusBadRequest || !strings.Contains(e.Message, `batch "no-such-batch": there is no such batch`) {
			t.Errorf("unknown batch: %d %q", r.status, e.Message)
		}
	})

	t.Run("RepairAPI", func(t *testing.T) {
		want, err := b.st.RepairEffectList(ctx, b.st.Pool, store.RepairEffectListParams{})
		if err != nil || len(want) == 0 {
			t.Fatalf("store: %+v, %v", want, err)
		}
		r := b.api(t, tok, "GET", "/api/v1/reports/repair", "")
		var got struct{ Fields []store.RepairEffect }
		if err := json.Unmarshal([]byte(r.body), &got); err != nil || r.status != http.StatusOK || len(got.Fields) != len(want) || got.Fields[0] != want[0] {
			t.Errorf("%d %s, want %+v", r.status, r.body, want)
		}
	})

	t.Run("BatchesAPI", func(t *testing.T) {
		r := b.api(t, tok, "GET", "/api/v1/batches?schema=customer_message", "")
		var list struct{ Batches []store.BatchRow }
		if err := json.Unmarshal([]byte(r.body), &list); err != nil || r.status != http.StatusOK || len(list.Batches) != 1 {
			t.Fatalf("%d %s (%v)", r.status, r.body, err)
		}
		if g := list.Batches[0]; g.ID != b.batch || g.Messages != 2 || g.Failed != 2 || g.LLMCalls != 3 || g.CostUSD <= 0 {
			t.Errorf("batch row = %+v", g)
		}
		r = b.api(t, tok, "GET", "/api/v1/batches/"+b.batch, "")
		var one struct {
			BatchID    string `json:"batch_id"`
			Messages   int
			Failed     int
			Done       bool
			Accounting struct {
				Runs        int
				RepairCalls int `json:"repair_calls"`
			}
			Triage map[string]int `json:"triage_items"`
		}
		if err := json.Unmarshal([]byte(r.body), &one); err != nil || r.status != http.StatusOK {
			t.Fatalf("%d %s (%v)", r.status, r.body, err)
		}
		if one.BatchID != b.batch || one.Messages != 2 || one.Failed != 2 || !one.Done || one.Accounting.Runs != 2 ||
			one.Accounting.RepairCalls != 1 || one.Triage["open"] != 2 || one.Triage["approved"] != 0 {
			t.Errorf("batch = %s", r.body)
		}
		r = b.api(t, tok, "GET", "/api/v1/batches/no-such-batch", "")
		if e := apiErr(t, r); r.status != http.StatusNotFound || !strings.Contains(e.Message, `there is no batch "no-such-batch"`) {
			t.Errorf("unknown batch: %d %q", r.status, e.Message)
		}
	})

	t.Run("Page", func(t *testing.T) {
		if err := b.st.BatchInsert(ctx, b.st.Pool, store.BatchInsertParams{ID: "b-hostile", SchemaID: "customer_message",
			SourceName: `<script>alert(1)</script>.jsonl`}); err != nil {
			t.Fatal(err)
		}
		// One call's reply had no usage: the batch's calls say so.
		if _, err := b.st.Pool.Exec(ctx, `UPDATE llm_calls SET usage_estimated = true WHERE id = (SELECT min(id) FROM llm_calls)`); err != nil {
			t.Fatal(err)
		}
		b.reviewer(t, "alice", "alice's long password")
		c := b.client(t)
		c.login("alice", "alice's long password")
		r := c.get("/reports")
		if r.status != http.StatusOK {
			t.Fatalf("reports page: %d", r.status)
		}
		for _, s := range []string{
			`<code class="path">` + want[0].PathPattern + `</code>`,
			`href="/?status=any&amp;schema=customer_message&amp;kind=` + want[0].Kind,
			`<code>` + b.batch + `</code>`,
			`&lt;script&gt;alert(1)&lt;/script&gt;.jsonl`,
			`(none new: duplicates or rejected lines)`,
			`id="repair-table"`,
			`>3 <small title="calls whose reply had no usage: their tokens and cost are estimates">(1 estimated)</small></td>`,
		} {
			if !strings.Contains(r.body, s) {
				t.Errorf("reports page lacks %q", s)
			}
		}
		if strings.Contains(r.body, "<script>alert(1)") {
			t.Error("a source name is not escaped")
		}

		r = c.get("/reports?batch=b-clean")
		if r.status != http.StatusOK || !strings.Contains(r.body, "No errors recorded in this batch.") ||
			!strings.Contains(r.body, `Which fields fail most in batch <code>b-clean</code>`) || !strings.Contains(r.body, `href="/reports?batch=`+b.batch+`#failing-fields"`) {
			t.Errorf("of a batch without errors: %d", r.status)
		}
		r = c.get("/reports?batch=" + b.batch)
		if r.status != http.StatusOK || !strings.Contains(r.body, `<code class="path">`+want[0].PathPattern) || !strings.Contains(r.body, `&amp;batch=`+b.batch+`" title="triage items with this error"`) {
			t.Errorf("of the fixture's batch: %d, its fields or their links missing", r.status)
		}
		r = c.get("/reports?batch=no-such-batch")
		if r.status != http.StatusOK || !strings.Contains(r.body, `batch &#34;no-such-batch&#34;: there is no such batch`) || !strings.Contains(r.body, `<code class="path">`+want[0].PathPattern) {
			t.Errorf("unknown batch: %d, notice or rows missing", r.status)
		}

		r = c.get("/reports?since=2999-01-01")
		if r.status != http.StatusOK || !strings.Contains(r.body, "No errors recorded in this window.") {
			t.Errorf("since the future: %d", r.status)
		}
		// A stale or mistyped link still shows the reports, with a notice;
		// only the bad value is left out.
		r = c.get("/reports?since=lastweek")
		if r.status != http.StatusOK || !strings.Contains(r.body, `id="report-notice"`) || !strings.Contains(r.body, `since &#34;lastweek&#34;`) ||
			!strings.Contains(r.body, `<code class="path">`+want[0].PathPattern) {
			t.Errorf("bad since: %d, notice or rows missing", r.status)
		}
		r = c.get("/reports?since=lastweek&schema=return_request")
		if r.status != http.StatusOK || !strings.Contains(r.body, `since &#34;lastweek&#34;`) ||
			!strings.Contains(r.body, `<option selected>return_request</option>`) || strings.Contains(r.body, `<code class="path">`+want[0].PathPattern) {
			t.Errorf("bad since with a good schema: %d, the schema was not kept", r.status)
		}
		r = c.get("/reports?shcema=customer_message")
		if r.status != http.StatusOK || !strings.Contains(r.body, `unknown parameter &#34;shcema&#34;`) {
			t.Errorf("misspelt parameter: %d, no notice", r.status)
		}
	})
}

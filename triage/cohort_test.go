package triage_test

import (
	"context"
	"encoding/json"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/extractq/extractq/store"
)

// A cohort (DESIGN.md, "Words") filters the queue, counts as facets, and
// picks what a bulk re-run takes: after a prompt fix, an admin re-runs
// the items of the old prompt version only. A value no item's run has is
// a 400 on the API and a notice on the queue page.
func TestCohortFilter(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := newBundle(t, bundleOpts{stream: true})
	tok := newToken(t, b, "robot")
	b.failedItem(t, "customer_message", albertText, albertFirst, albertRepair)
	b.failedItem(t, "customer_message", albertText+"\nps", albertFirst)
	newID, newMsg := b.failedItem(t, "customer_message", albertText+"\npps", albertFirst)
	// The third item's run was made by the new prompt, on another model.
	if _, err := b.st.Pool.Exec(ctx, `UPDATE llm_calls SET prompt_version = 'extract.v2@abc123', model = 'sim-2' WHERE message_id = $1`, newMsg); err != nil {
		t.Fatal(err)
	}

	r := b.api(t, tok, "GET", "/api/v1/items/counts", "")
	var c store.TriageCounts
	if err := json.Unmarshal([]byte(r.body), &c); err != nil || r.status != http.StatusOK {
		t.Fatalf("counts: %d %s (%v)", r.status, r.body, err)
	}
	wantPrompts := []store.TriageFacet{{Value: "extract.v1", Count: 2}, {Value: "extract.v2@abc123", Count: 1}}
	wantModels := []store.TriageFacet{{Value: "extractq-sim-1", Count: 2}, {Value: "sim-2", Count: 1}}
	if !slices.Equal(c.PromptVersions, wantPrompts) || !slices.Equal(c.Models, wantModels) ||
		!slices.Equal(c.SchemaVersions, []store.TriageFacet{{Value: "1", Count: 3}}) {
		t.Errorf("cohort facets: %+v %+v %+v", c.PromptVersions, c.SchemaVersions, c.Models)
	}

	r = b.api(t, tok, "GET", "/api/v1/items?prompt_version=extract.v2@abc123&schema_version=1", "")
	if r.status != http.StatusOK || !strings.Contains(r.body, `"total":1`) || !strings.Contains(r.body, `"id":`+strconv.FormatInt(newID, 10)+`,`) {
		t.Errorf("items of extract.v2: %d %s", r.status, r.body)
	}
	for _, tc := range []struct{ path, want string }{
		{"/api/v1/items?prompt_version=extract.v3", `prompt_version "extract.v3": no triage item's run has it; want one of extract.v1, extract.v2@abc123`},
		{"/api/v1/items/counts?model=gpt-9", `model "gpt-9": no triage item's run has it; want one of extractq-sim-1, sim-2`},
		{"/api/v1/rerun/count?schema=customer_message&schema_version=7", `schema_version "7": no triage item's run has it; want one of 1`},
	} {
		r := b.api(t, tok, "GET", tc.path, "")
		if e := apiErr(t, r); r.status != http.StatusBadRequest || e.Code != "invalid" || !strings.Contains(e.Message, tc.want) {
			t.Errorf("%s: %d %s, want 400 with %q", tc.path, r.status, r.body, tc.want)
		}
	}

	// The queue page shows the facets, and leaves out a value it cannot mean.
	b.reviewer(t, "alice", "correct horse battery")
	alice := b.client(t)
	alice.login("alice", "correct horse battery")
	page := alice.get("/?model=sim-2")
	if page.status != http.StatusOK || !strings.Contains(page.body, `<strong id="total">1</strong>`) ||
		!strings.Contains(page.body, `<ul id="facet-model"><li><a href="/?model=sim-2" class="on">`) ||
		!strings.Contains(page.body, `name="model" value="sim-2"`) {
		t.Errorf("queue page of model sim-2: %d %s", page.status, page.body)
	}
	page = alice.get("/?prompt_version=extract.v3")
	if page.status != http.StatusOK || !strings.Contains(page.body, `prompt_version &#34;extract.v3&#34;: no triage item&#39;s run has it`) ||
		!strings.Contains(page.body, `<strong id="total">3</strong>`) {
		t.Errorf("queue page of an unknown prompt version: %d %s", page.status, page.body)
	}

	// Bulk re-run of the old prompt's items: two, the new one left open.
	cohort := "schema=customer_message&prompt_version=extract.v1&model=extractq-sim-1"
	if r := b.api(t, tok, "GET", "/api/v1/rerun/count?"+cohort, ""); !strings.Contains(r.body, `"count":2`) ||
		!strings.Contains(r.body, `"prompt_version":["extract.v1"]`) {
		t.Fatalf("bulk count of extract.v1: %d %s", r.status, r.body)
	}
	r = b.api(t, tok, "POST", "/api/v1/rerun?"+cohort, `{"confirmed":2,"note":"prompt fixed"}`)
	if r.status != http.StatusOK || !strings.Contains(r.body, `"runs":2`) {
		t.Fatalf("bulk re-run of extract.v1: %d %s", r.status, r.body)
	}
	r = b.api(t, tok, "GET", "/api/v1/items", "")
	if !strings.Contains(r.body, `"total":1`) || !strings.Contains(r.body, `"id":`+strconv.FormatInt(newID, 10)+`,`) {
		t.Errorf("open after the bulk re-run: %s", r.body)
	}
	r = b.api(t, tok, "GET", "/api/v1/audit", "")
	if !strings.Contains(r.body, `"prompt_version":"extract.v1"`) {
		t.Errorf("the bulk re-run's audit entry lacks its cohort: %s", r.body)
	}
}

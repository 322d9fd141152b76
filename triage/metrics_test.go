package triage_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

// counterValue returns the counter name's value with exactly labels, 0
// when there is none.
func counterValue(t *testing.T, reg *prometheus.Registry, name string, labels map[string]string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	metric:
		for _, m := range mf.GetMetric() {
			if len(m.GetLabel()) != len(labels) {
				continue
			}
			for _, lp := range m.GetLabel() {
				if labels[lp.GetName()] != lp.GetValue() {
					continue metric
				}
			}
			return m.GetCounter().GetValue()
		}
	}
	return 0
}

// The server counts its requests by route, its decisions by kind and via,
// and reads the open items at each scrape.
func TestMetrics(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	b := newBundle(t, bundleOpts{registry: reg})
	tok := newToken(t, b, "robot")
	approve, _ := b.failedItem(t, "customer_message", albertText, albertFirst, albertRepair)
	reject, _ := b.failedItem(t, "customer_message", albertText+"\nps", albertFirst)

	open := func() float64 {
		t.Helper()
		mfs, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		for _, mf := range mfs {
			if mf.GetName() == "extractq_triage_open_items" {
				return mf.GetMetric()[0].GetGauge().GetValue()
			}
		}
		t.Fatal("no extractq_triage_open_items")
		return 0
	}
	if n := open(); n != 2 {
		t.Errorf("open items %v, want 2", n)
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == "extractq_triage_decisions_total" && len(mf.GetMetric()) != 6 {
			t.Errorf("%d decision series before any decision, want 6 at 0", len(mf.GetMetric()))
		}
	}

	body, _ := json.Marshal(map[string]any{"record": json.RawMessage(albertRepair), "override_reason": "the customer confirmed it by phone"})
	if r := b.api(t, tok, "POST", fmt.Sprintf("/api/v1/items/%d/approve", approve), string(body)); r.status != http.StatusOK {
		t.Fatalf("approve: %d %s", r.status, r.body)
	}
	if r := b.api(t, tok, "POST", fmt.Sprintf("/api/v1/items/%d/reject", reject), `{"reason": "not a customer message"}`); r.status != http.StatusOK {
		t.Fatalf("reject: %d %s", r.status, r.body)
	}
	if r := b.api(t, tok, "POST", fmt.Sprintf("/api/v1/items/%d/reject", reject), `{"reason": "again"}`); r.status != http.StatusConflict {
		t.Fatalf("reject again: %d %s", r.status, r.body)
	}
	if n := open(); n != 0 {
		t.Errorf("open items %v after both were decided, want 0", n)
	}

	for _, tc := range []struct {
		decision, via string
		want          float64
	}{
		{"approved", "api", 1},
		{"rejected", "api", 1},
		{"rerun", "api", 0},
	} {
		if got := counterValue(t, reg, "extractq_triage_decisions_total", map[string]string{"decision": tc.decision, "via": tc.via}); got != tc.want {
			t.Errorf("decisions %s via %s = %v, want %v", tc.decision, tc.via, got, tc.want)
		}
	}
	for _, tc := range []struct {
		route, code string
		want        float64
	}{
		{"/api/v1/items/{id}/reject", "200", 1},
		{"/api/v1/items/{id}/reject", "409", 1},
		{"/api/v1/items/{id}/approve", "200", 1},
	} {
		if got := counterValue(t, reg, "extractq_triage_http_requests_total", map[string]string{"route": tc.route, "method": "post", "code": tc.code}); got != tc.want {
			t.Errorf("requests %s %s = %v, want %v", tc.route, tc.code, got, tc.want)
		}
	}
}

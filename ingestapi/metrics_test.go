package ingestapi_test

import (
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/extractq/extractq/ingestapi"
)

// GET /metrics serves the requests by route and status, and the lines of
// POSTed bodies by result, without the token.
func TestServeMetrics(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	se := newServerEnv(t, nil, func(c *ingestapi.ServerConfig) { c.Registry = reg })
	p := se.post(t, "", "application/x-ndjson",
		`{"id":"m-1","text":"Where is order 48213?"}`+"\n"+`{"id":"m-2","text":"Refund please"}`+"\n"+`{"id":"m-3"}`+"\n")
	if p.status != http.StatusOK || p.ans.Published != 2 || p.ans.Rejected != 1 {
		t.Fatalf("POST: %d %s", p.status, p.body)
	}
	if r := se.post(t, "", "text/plain", "x"); r.status != http.StatusUnsupportedMediaType {
		t.Fatalf("POST text/plain: %d", r.status)
	}
	if r, _ := se.batchStatus(t, "/v1/batches/"+p.ans.BatchID); r.status != http.StatusOK {
		t.Fatalf("GET batch: %d", r.status)
	}

	resp, err := http.Get(se.base + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /metrics: %d %v", resp.StatusCode, err)
	}
	text := string(b)
	for _, want := range []string{
		`extractq_ingest_lines_total{result="published"} 2`,
		`extractq_ingest_lines_total{result="duplicate"} 0`,
		`extractq_ingest_lines_total{result="rejected"} 1`,
		`extractq_ingest_http_requests_total{code="200",method="post",route="/v1/messages"} 1`,
		`extractq_ingest_http_requests_total{code="415",method="post",route="/v1/messages"} 1`,
		`extractq_ingest_http_requests_total{code="200",method="get",route="/v1/batches/{id}"} 1`,
		`extractq_ingest_http_request_seconds_count{route="/v1/messages"} 2`,
		`extractq_ingest_http_requests_in_flight 0`,
	} {
		if !strings.Contains(text, want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
	if t.Failed() {
		t.Logf("/metrics:\n%s", text)
	}
}

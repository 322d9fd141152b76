package worker_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
)

// TestStoredPathsHoldNoInventedKeys runs replies whose keys are the
// customer's words (a new key, one nested, a number in an array's place,
// a case twin, a duplicate, a key with a NUL or a lone surrogate) through
// the worker twice (first reply and repair), and checks that no stored
// error (failure_events, triage items, the results outbox) holds any of them in its path or
// message, with either repair: a new reply, or a patch whose op and path
// are those words.
func TestStoredPathsHoldNoInventedKeys(t *testing.T) {
	t.Parallel()
	base := record(t, map[string]any{"intent": "status_delivery_time", "flow": "order_issue"})
	with := func(extra string) string { return base[:len(base)-1] + "," + extra + "}" }
	replies := []string{
		with(`"SECRET Chloe Zhang":"x"`),
		with(`"zip_code_SECRET":{"SECRET":"1"}`),
		strings.Replace(base, `"product_names":null`, `"product_names":{"4111111111111111":"a\u0000","94105":"b\u0000"}`, 1),
		strings.Replace(base, `"email":null`, `"EMAIL":"chloe@example.com","email":null`, 1),
		with(`"SECRET dup":1,"SECRET dup":2`),
		with(`"SECRET\u0000nul":"x"`),
		with(`"SECRET \ud800":"x"`),
	}
	for _, repair := range []string{"regenerate", "patch"} {
		t.Run(repair, func(t *testing.T) {
			t.Parallel()
			checkStoredPaths(t, repair, replies)
		})
	}
}

func checkStoredPaths(t *testing.T, repair string, replies []string) {
	var mu sync.Mutex
	calls := map[int]int{}
	patches := []string{
		`[{"op":"replace","path":"/SECRET Chloe Zhang","value":1}]`,
		`[{"op":"SECRET Chloe Zhang","path":"/flow","value":"order_issue"}]`,
	}
	llm := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		w.Header().Set("Content-Type", "application/json")
		for i, rep := range replies {
			if strings.Contains(string(body), fmt.Sprintf("message number %d.", i)) {
				mu.Lock()
				calls[i]++
				n := calls[i]
				mu.Unlock()
				if repair == "patch" && n > 1 {
					rep = patches[i%len(patches)]
				}
				io.WriteString(w, completion(t, rep))
				return
			}
		}
		http.Error(w, "no reply scripted", http.StatusBadRequest)
	})
	b := setup(t, setupOpts{handler: llm, repair: repair})
	// The results outbox copies each failed run's errors (results.enabled).
	if err := b.st.ResultsOutboxEnable(context.Background(), b.st.Pool, true); err != nil {
		t.Fatal(err)
	}
	var in strings.Builder
	for i := range replies {
		fmt.Fprintf(&in, `{"id":"p%d","text":"where is my order 4821300017, message number %d."}`+"\n", i, i)
	}
	sum := b.ingestReader(t, strings.NewReader(in.String()))
	if bs := b.wait(t, sum.BatchID); bs.Failed != len(replies) {
		t.Fatalf("batch %+v, want every run failed", bs)
	}
	ctx := context.Background()
	rows, err := b.st.Pool.Query(ctx, `
		SELECT 'failure_events', f.path || ' ' || f.message FROM failure_events f JOIN runs r USING (message_id, run_no) WHERE r.batch_id = $1
		UNION ALL
		SELECT 'triage_items', (e->>'path') || ' ' || (e->>'message') FROM triage_items i JOIN runs r USING (message_id, run_no), jsonb_array_elements(i.errors) e
		WHERE r.batch_id = $1
		UNION ALL
		SELECT 'results_outbox', (e->>'path') || ' ' || (e->>'message') FROM results_outbox o, jsonb_array_elements(o.detail->'errors') e
		WHERE o.batch_id = $1`, sum.BatchID)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	n := map[string]int{}
	for rows.Next() {
		var table, path string
		if err := rows.Scan(&table, &path); err != nil {
			t.Fatal(err)
		}
		n[table]++
		for _, w := range []string{"SECRET", "4111", "94105", "EMAIL", "Chloe", "\x00"} {
			if strings.Contains(path, w) {
				t.Errorf("%s error %q holds the reply's key", table, path)
			}
		}
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	// Each table checked holds the errors: none of the checks above can
	// pass on an empty table.
	for _, table := range []string{"failure_events", "triage_items", "results_outbox"} {
		if n[table] < len(replies) {
			t.Errorf("%s: %d stored errors, want one per run at least", table, n[table])
		}
	}
}

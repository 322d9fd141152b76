package main

import (
	"bytes"
	"context"
	"encoding/json"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/extractq/extractq/config"
	"github.com/extractq/extractq/devtools/internal/devstack"
	"github.com/extractq/extractq/pipeline"
	"github.com/extractq/extractq/schemas"
	"github.com/extractq/extractq/store/storetest"
)

// TestPlanLeaderKills: the cluster's leader kills fire by the share done,
// while the batch is under way, on the NATS target; a plan without them
// draws exactly what it drew before they existed.
func TestPlanLeaderKills(t *testing.T) {
	t.Parallel()
	p := plan{Kills: 1, Cuts: 1, Workers: 2, NATS: true, Postgres: true, Window: 10 * time.Second, AckWait: 10 * time.Second}
	without := planEvents(rand.New(rand.NewPCG(3, 1)), p)
	p.LeaderKills = 2
	with := planEvents(rand.New(rand.NewPCG(3, 1)), p)
	if len(with) != len(without)+2 {
		t.Fatalf("%d events with 2 leader kills, %d without", len(with), len(without))
	}
	n := 0
	for _, e := range with {
		if e.Kind != killNATSLeader {
			continue
		}
		n++
		if e.Trigger != byDone || e.At < planFrom || e.At >= lossTo || e.target() != "NATS" || e.Down <= 0 {
			t.Fatalf("leader kill %+v (target %s)", e, e.target())
		}
	}
	if n != 2 {
		t.Fatalf("%d leader kills, want 2", n)
	}
	var others []event
	for _, e := range with {
		if e.Kind != killNATSLeader {
			others = append(others, e)
		}
	}
	if !reflect.DeepEqual(others, without) {
		t.Fatalf("the other faults changed with leader kills planned:\n%+v\nwant\n%+v", others, without)
	}
}

func TestPlanEvents(t *testing.T) {
	t.Parallel()
	p := plan{Kills: 3, Stops: 1, Cuts: 5, IngestKills: 1, Workers: 2, NATS: true, Postgres: true, StoreLoss: true,
		Outage: 45 * time.Second, Window: 20 * time.Second, AckWait: 10 * time.Second}
	a := planEvents(rand.New(rand.NewPCG(7, 1)), p)
	b := planEvents(rand.New(rand.NewPCG(7, 1)), p)
	if len(a) != 14 {
		t.Fatalf("%d events, want 3 kills, 1 stop, 5 cuts, 1 ingest kill, 1 outage, 2 restarts and 1 store loss", len(a))
	}
	kinds := map[eventKind]int{}
	links := map[link]int{}
	triggers := map[trigger]int{}
	for i, e := range a {
		if e != b[i] {
			t.Fatalf("same seed, event %d differs: %+v vs %+v", i, e, b[i])
		}
		switch e.Trigger {
		case byDone:
			if e.At < planFrom || e.At >= planTo {
				t.Fatalf("event %d at %v done: not in [%v, %v)", i, e.At, planFrom, planTo)
			}
		case bySeconds:
			if e.After < time.Second || e.After >= p.Window {
				t.Fatalf("event %d %s after ingest started: not in [1s, %s)", i, e.After, p.Window)
			}
		case byStored:
			if e.At < storedFrom || e.At >= storedTo {
				t.Fatalf("event %d at %v stored: not in [%v, %v)", i, e.At, storedFrom, storedTo)
			}
		}
		if e.Worker < 0 || e.Worker >= 2 || e.Down <= 0 || e.Delay < 0 {
			t.Fatalf("event %d: %+v", i, e)
		}
		ingests := e.Kind == killIngest || (e.Kind == cutLink && e.Link.ingests())
		if ingests != (e.Trigger == byStored) {
			t.Fatalf("event %d (%s): ingest's faults, and only they, fire by the share stored: %+v", i, e.what(), e)
		}
		switch e.Kind {
		case stopWorker:
			if e.Down <= p.AckWait {
				t.Fatalf("SIGSTOP for %s, not past the ack wait %s", e.Down, p.AckWait)
			}
		case loseStore:
			if e.Trigger != byDone || e.At < lossFrom || e.At >= lossTo {
				t.Fatalf("store lost at %+v: want by the share done, in [%v, %v)", e, lossFrom, lossTo)
			}
		case providerOutage:
			if e.Down != p.Outage {
				t.Fatalf("provider outage of %s, want %s", e.Down, p.Outage)
			}
		case cutLink:
			links[e.Link]++
		}
		kinds[e.Kind]++
		triggers[e.Trigger]++
	}
	want := map[eventKind]int{killWorker: 3, stopWorker: 1, cutLink: 5, killIngest: 1, providerOutage: 1, restartNATS: 1, restartPostgres: 1, loseStore: 1}
	if !reflect.DeepEqual(kinds, want) {
		t.Fatalf("kinds %v, want %v", kinds, want)
	}
	for l := range numLinks {
		if links[l] < 1 {
			t.Fatalf("cuts %v: five cuts leave out %s", links, l)
		}
	}
	if triggers[byDone] == 0 || triggers[bySeconds] == 0 {
		t.Fatalf("triggers %v: want faults by share done and by seconds", triggers)
	}
	short := planEvents(rand.New(rand.NewPCG(1, 1)), plan{Kills: 1, Workers: 2})
	if len(short) != 1 || short[0].Kind != killWorker {
		t.Fatalf("short plan %+v", short)
	}
}

func TestWriteMessages(t *testing.T) {
	t.Parallel()
	src := filepath.Join(t.TempDir(), "src.jsonl")
	os.WriteFile(src, []byte(`{"id": "a", "source": "s", "text": "first <b>text</b>", "meta": {"k": 1}}

{"id": 42, "text": "second"}
{"id": "c", "text": "third"}
`), 0o644)
	var buf bytes.Buffer
	if err := writeMessages(&buf, src, 7); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	wantIDs := []string{"a", "42", "c", "a~2", "42~2", "c~2", "a~3"}
	wantTexts := []string{"first <b>text</b>", "second", "third"}
	if len(lines) != len(wantIDs) {
		t.Fatalf("%d lines", len(lines))
	}
	for i, l := range lines {
		var m struct {
			ID     any             `json:"id"`
			Source string          `json:"source"`
			Text   string          `json:"text"`
			Meta   json.RawMessage `json:"meta"`
		}
		if err := json.Unmarshal([]byte(l), &m); err != nil {
			t.Fatal(err)
		}
		id, _ := json.Marshal(m.ID)
		if strings.Trim(string(id), `"`) != wantIDs[i] || m.Text != wantTexts[i%3] {
			t.Errorf("line %d: %s", i+1, l)
		}
		if i%3 == 0 && (m.Source != "s" || string(m.Meta) != `{"k":1}`) {
			t.Errorf("line %d lost its other keys: %s", i+1, l)
		}
	}
	if err := writeMessages(&buf, filepath.Join(t.TempDir(), "missing.jsonl"), 1); err == nil {
		t.Fatal("no error for a missing source")
	}
}

const checkText = "hi, order 4821300017 never arrived, my account id is U85ALFLG2Z"

// record returns a customer_message record of checkText with orderID.
func record(t *testing.T, orderID string) string {
	t.Helper()
	r := map[string]any{"intent": "missing", "flow": "shipping_issue", "full_name": nil, "account_id": "U85ALFLG2Z", "username": nil,
		"email": nil, "phone": nil, "membership_level": nil, "order_id": orderID, "zip_code": nil,
		"street_address": nil, "city": nil, "state": nil, "payment_method": nil, "purchase_date": nil,
		"refund_amount": nil, "product_names": nil}
	b, err := json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestCheckStore writes one of each case the checks tell apart into a
// private schema and checks the verdict.
func TestCheckStore(t *testing.T) {
	t.Parallel()
	st := storetest.NewStore(t)
	ctx := context.Background()
	schema, err := pipeline.LoadSchema(schemas.FS, "customer_message", "customer_message.v1.json")
	if err != nil {
		t.Fatal(err)
	}
	good, ungrounded := record(t, "4821300017"), record(t, "1111111111")
	if !validResult(schema, []byte(good), checkText) || validResult(schema, []byte(ungrounded), checkText) {
		t.Fatal("fixture records do not validate as expected")
	}

	exec := func(sql string, args ...any) {
		t.Helper()
		if _, err := st.Pool.Exec(ctx, sql, args...); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}
	exec(`INSERT INTO batches (id, schema_id) VALUES ('b1', 'customer_message')`)
	type row struct {
		status      string
		extraction  string // data, "" for none
		triage      bool
		extractCall int // llm_calls rows with attempt 1
		superseded  int // llm_calls rows with attempt 1 of a delivery that did not decide the run
	}
	rows := []row{
		{status: "succeeded", extraction: good, extractCall: 1}, // an outcome
		{status: "queued"}, // lost
		{status: "failed", triage: true, extractCall: 1},                       // an outcome
		{status: "succeeded", extraction: ungrounded, extractCall: 1},          // an outcome, unvalidated
		{status: "succeeded", extraction: good, triage: true, extractCall: 1},  // duplicated: two outcomes
		{status: "repaired", extraction: good, extractCall: 2},                 // duplicated: calls of two deliveries
		{status: "succeeded", extractCall: 1},                                  // lost: no record
		{status: "failed", extraction: good, triage: true, extractCall: 1},     // duplicated and unvalidated
		{status: "succeeded", extraction: good, extractCall: 1, superseded: 1}, // an outcome, after a nak'ed delivery
	}
	for i, r := range rows {
		var id int64
		err := st.Pool.QueryRow(ctx, `INSERT INTO messages (source, external_id, body, content_hash, batch_id)
			VALUES ('t', $1, $2, '\x00', 'b1') RETURNING id`, "m"+string(rune('a'+i)), checkText).Scan(&id)
		if err != nil {
			t.Fatal(err)
		}
		exec(`INSERT INTO runs (message_id, run_no, batch_id, schema_id, status, dedup_id) VALUES ($1, 1, 'b1', 'customer_message', $2, $3)`,
			id, r.status, "d"+string(rune('a'+i)))
		for range r.extractCall {
			exec(`INSERT INTO llm_calls (message_id, run_no, attempt, purpose, model, prompt_version, schema_id, schema_version, request_mode)
				VALUES ($1, 1, 1, 'extract', 'm', 'p', 'customer_message', 'v', 'response_format')`, id)
		}
		for range r.superseded {
			exec(`INSERT INTO llm_calls (message_id, run_no, attempt, purpose, model, prompt_version, schema_id, schema_version, request_mode, superseded)
				VALUES ($1, 1, 1, 'extract', 'm', 'p', 'customer_message', 'v', 'response_format', true)`, id)
		}
		if r.extraction != "" {
			exec(`INSERT INTO extractions (message_id, run_no, schema_id, schema_version, outcome, data)
				VALUES ($1, 1, 'customer_message', 'v', 'succeeded', $2)`, id, r.extraction)
		}
		if r.triage {
			exec(`INSERT INTO triage_items (message_id, run_no, schema_id, reason, errors) VALUES ($1, 1, 'customer_message', 'parse', '[]')`, id)
		}
	}

	// A second run of the first message, as a line ingested twice would
	// make: it has an outcome, and is a duplicate.
	var first int64
	if err := st.Pool.QueryRow(ctx, `SELECT id FROM messages WHERE external_id = 'ma'`).Scan(&first); err != nil {
		t.Fatal(err)
	}
	exec(`INSERT INTO runs (message_id, run_no, batch_id, schema_id, status, dedup_id) VALUES ($1, 2, 'b1', 'customer_message', 'succeeded', 'da2')`, first)
	exec(`INSERT INTO llm_calls (message_id, run_no, attempt, purpose, model, prompt_version, schema_id, schema_version, request_mode)
		VALUES ($1, 2, 1, 'extract', 'm', 'p', 'customer_message', 'v', 'response_format')`, first)
	exec(`INSERT INTO extractions (message_id, run_no, schema_id, schema_version, outcome, data)
		VALUES ($1, 2, 'customer_message', 'v', 'succeeded', $2)`, first, good)

	// One more message was generated than was stored.
	v, err := checkStore(ctx, st.Pool, map[string]*pipeline.Schema{"customer_message": schema}, len(rows)+1, 14)
	if err != nil {
		t.Fatal(err)
	}
	want := verdict{Messages: 10, Stored: 9, Outcomes: 7, Lost: 3, Duplicated: 4, Unvalidated: 2, Served: 14, Recorded: 11, WastedCalls: 3}
	got := v
	got.ByStatus, got.ByReason = nil, nil
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("verdict\n got %+v\nwant %+v", got, want)
	}
	if v.ByStatus["succeeded"] != 6 || v.ByReason["parse"] != 3 || v.ok() {
		t.Fatalf("by status %v, by reason %v", v.ByStatus, v.ByReason)
	}
	if line := v.finalLine(); line != "messages=10 outcomes=7 lost=3 duplicated=4 unvalidated=2 wasted_calls=3" {
		t.Fatalf("final line %q", line)
	}
	if !(verdict{Messages: 5, Outcomes: 5, WastedCalls: 2}).ok() {
		t.Fatal("a clean verdict is not ok")
	}
}

func TestCountLogMessages(t *testing.T) {
	t.Parallel()
	p := filepath.Join(t.TempDir(), "w.log")
	os.WriteFile(p, []byte(`{"level":"info","msg":"run done"}
{"level":"warn","msg":"fetch failed; retrying"}
not json
{"level":"warn","msg":"fetch failed; retrying"}
{"level":"info","msg":"`+outcomeExistsMsg+`"}
{"level":"error","msg":"writing outcome failed; will retry"}
`), 0o644)
	got := countLogMessages([]string{p, filepath.Join(t.TempDir(), "missing.log")})
	want := map[string]int{"warn: fetch failed; retrying": 2, "info: " + outcomeExistsMsg: 1, "error: writing outcome failed; will retry": 1}
	if len(got) != len(want) {
		t.Fatalf("%v", got)
	}
	for k, n := range want {
		if got[k] != n {
			t.Fatalf("%q: %d, want %d (%v)", k, got[k], n, got)
		}
	}
	if l := sortedCounts(got); !strings.Contains(l[0], "2 × warn: fetch failed") {
		t.Fatalf("%q", l)
	}
	if l := lastLineWith(p, "fetch"); !strings.Contains(l, "fetch failed") {
		t.Fatalf("%q", l)
	}
	if l := lastErrorLog(p); l != "writing outcome failed; will retry" {
		t.Fatalf("%q", l)
	}
}

// TestSimulator checks that the harness counts the chat calls the
// simulator answered, and only those.
func TestSimulator(t *testing.T) {
	t.Parallel()
	port, err := devstack.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	s, err := newSimulator(config.Default().Simulator, 2*time.Millisecond, 20*time.Millisecond, 1, port)
	if err != nil {
		t.Fatal(err)
	}
	defer s.close()
	post := func(body string) int {
		t.Helper()
		resp, err := http.Post(s.baseURL()+"/chat/completions", "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	req := `{"model":"extractq-sim-1","messages":[{"role":"system","content":"Extract."},
		{"role":"user","content":"Extract the record from this customer message.\n<message>\nmy order 4821300017 is late\n</message>"}],
		"response_format":{"type":"json_schema","json_schema":{"name":"r","strict":true,"schema":{"type":"object",
		"properties":{"order_id":{"type":["string","null"]}},"required":["order_id"],"additionalProperties":false}}}}`
	if code := post(req); code != http.StatusOK {
		t.Fatalf("chat call: HTTP %d", code)
	}
	if code := post(`{not json`); code != http.StatusBadRequest {
		t.Fatalf("bad call: HTTP %d", code)
	}
	resp, err := http.Get(s.baseURL() + "/models")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if s.requests() != 2 || s.served() != 1 {
		t.Fatalf("requests %d, served %d; want 2 and 1", s.requests(), s.served())
	}
}

package main

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/extractq/extractq/internal/startup"
	"github.com/extractq/extractq/store"
	"github.com/extractq/extractq/store/storetest"
)

// nowhere reaches no Postgres: the usage cases stop before connecting.
var nowhere = startup.Env{DatabaseURL: "postgres://postgres@127.0.0.1:1/none?sslmode=disable"}

func runArgs(t *testing.T, env startup.Env, stdin string, args ...string) (int, string, string) {
	t.Helper()
	var stdout, stderr bytes.Buffer
	code := run(t.Context(), args, env, strings.NewReader(stdin), &stdout, &stderr)
	return code, stdout.String(), stderr.String()
}

func TestUsage(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		stdin string
		args  []string
		code  int
		want  string
	}{
		{"no command", "", nil, exitUsage, "retention erase -by NAME"},
		{"unknown command", "", []string{"delete"}, exitUsage, `unknown command "delete"`},
		{"erase without -by", "", []string{"erase", "m-1"}, exitUsage, "-by is required"},
		{"erase without ids", "", []string{"erase", "-by", "dpo"}, exitUsage, "no ids"},
		{"bad ids line", "m-1\n{\"id\": 1.5}\n", []string{"erase", "-by", "dpo", "-ids-file", "-"}, exitUsage,
			`standard input: line 2: "id" must be a string or an integer, not 1.5`},
		{"flag after the ids", "", []string{"erase", "-by", "dpo", "m-1", "-dry-run"}, exitUsage,
			`"-dry-run" comes after the ids: flags go before them`},
		{"flag after --", "", []string{"erase", "-by", "dpo", "--", "m-1", "--json"}, exitUsage,
			`the id "--json" is spelt as a flag`},
		{"id twice on a line", `{"id": "m-5", "id": "m-6"}`, []string{"erase", "-by", "dpo", "-ids-file", "-"}, exitUsage,
			"line 1: key /id occurs twice"},
		{"two objects on a line", `{"id": "m-5"}{"id": "m-6"}`, []string{"erase", "-by", "dpo", "-ids-file", "-"}, exitUsage,
			"line 1: data after the JSON value"},
		{"key case", `{"ID": "m-5"}`, []string{"erase", "-by", "dpo", "-ids-file", "-"}, exitUsage,
			`line 1: unknown key "ID" (keys are case-sensitive)`},
		{"gzip ids file", "\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\xff", []string{"erase", "-by", "dpo", "-ids-file", "-"}, exitUsage,
			"line 1 is not UTF-8 text"},
		{"UTF-16 ids file", "\xff\xfem\x00-\x001\x00\n\x00", []string{"erase", "-by", "dpo", "-ids-file", "-"}, exitUsage,
			"line 1 is not UTF-8 text"},
		{"id not UTF-8", "", []string{"erase", "-by", "dpo", "-source", "mail", "caf\xe9"}, exitUsage,
			`id "caf\xe9" is not valid UTF-8: ids and sources are kept byte for byte, so it names no stored message; nothing was erased`},
		{"source not UTF-8", "", []string{"erase", "-by", "dpo", "-source", "mail\xff", "m-1"}, exitUsage,
			`source "mail\xff" is not valid UTF-8`},
		{"ids object without id", `{"source": "mail"}`, []string{"erase", "-by", "dpo", "-ids-file", "-"}, exitUsage,
			`line 1: the object has no "id"`},
		{"missing ids file", "", []string{"erase", "-by", "dpo", "-ids-file", "no-such-file.txt"}, exitUsage, "no-such-file.txt"},
		{"purge without age", "", []string{"purge"}, exitUsage, "-older-than is required"},
		{"purge too recent", "", []string{"purge", "-older-than", "3h"}, exitUsage, "less than a day ago"},
		{"purge in the future", "", []string{"purge", "-older-than", "2099-01-01"}, exitUsage, "is in the future"},
		{"purge bad age", "", []string{"purge", "-older-than", "ninety days"}, exitUsage, `-older-than: "ninety days": want a look-back duration`},
		{"purge argument", "", []string{"purge", "-older-than", "90d", "now"}, exitUsage, `unexpected argument "now"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			code, _, stderr := runArgs(t, nowhere, tt.stdin, tt.args...)
			if code != tt.code || !strings.Contains(stderr, tt.want) {
				t.Errorf("exit %d, want %d; stderr does not hold %q:\n%s", code, tt.code, tt.want, stderr)
			}
		})
	}
}

// seed stores n finished messages of source "mail" (ids m-1 ... m-n) and
// one still queued (q-1), received ageDays ago.
func seed(ctx context.Context, t *testing.T, st *store.Store, n, ageDays int) {
	t.Helper()
	batch := fmt.Sprintf("b-%d", ageDays)
	if err := st.BatchInsert(ctx, st.Pool, store.BatchInsertParams{ID: batch, SchemaID: "customer_message"}); err != nil {
		t.Fatal(err)
	}
	ingest := func(id string) {
		text := "Order " + id + " never arrived."
		h := sha256.Sum256([]byte(text))
		if _, err := st.MessageIngest(ctx, st.Pool, store.MessageIngestParams{Source: "mail", ExternalID: id, Body: text,
			ContentHash: h[:], BatchID: batch, SchemaID: "customer_message"}); err != nil {
			t.Fatal(err)
		}
	}
	for i := range n {
		ingest(fmt.Sprintf("m-%d", i+1))
	}
	if _, err := st.Pool.Exec(ctx, `UPDATE runs SET status = 'succeeded', finished_at = now() WHERE batch_id = $1`, batch); err != nil {
		t.Fatal(err)
	}
	ingest("q-1")
	if _, err := st.Pool.Exec(ctx, `UPDATE messages SET received_at = now() - make_interval(days => $2) WHERE batch_id = $1`, batch, ageDays); err != nil {
		t.Fatal(err)
	}
}

func bodies(ctx context.Context, t *testing.T, st *store.Store) map[string]string {
	t.Helper()
	rows, err := st.Pool.Query(ctx, `SELECT external_id, body FROM messages`)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for rows.Next() {
		var id, body string
		if err := rows.Scan(&id, &body); err != nil {
			t.Fatal(err)
		}
		out[id] = body
	}
	return out
}

func TestErase(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	st := storetest.NewStore(t)
	seed(ctx, t, st, 3, 0)
	env := startup.Env{DatabaseURL: storetest.SchemaURL(t, st)}

	// A dry run says what would happen, with the same statuses, and
	// erases nothing.
	code, stdout, _ := runArgs(t, env, "", "erase", "-by", "dpo", "-source", "mail", "-dry-run", "m-1", "q-1", "m-1")
	if code != exitNotAll || !strings.Contains(stdout, "would erase 1, already erased 0, not found 0, queued 1 (of 2 distinct ids; 3 given)") {
		t.Errorf("dry run: exit %d\n%s", code, stdout)
	}
	if b := bodies(ctx, t, st); b["m-1"] == "" {
		t.Fatal("a dry run erased m-1")
	}
	// An id given with the wrong source: the hint names where it is.
	_, stdout, _ = runArgs(t, env, "", "erase", "-by", "dpo", "-dry-run", "m-1")
	if !strings.Contains(stdout, `not found: source "" id "m-1" (an id "m-1" is stored under source "mail": give -source)`) {
		t.Errorf("wrong source:\n%s", stdout)
	}
	_, stdout, _ = runArgs(t, env, "", "erase", "-by", "dpo", "-dry-run", "-json", "m-1")
	if !strings.Contains(stdout, `"status":"not_found","stored_under":["mail"]`) {
		t.Errorf("wrong source, -json:\n%s", stdout)
	}

	// An id that starts with "-" goes after --.
	code, stdout, _ = runArgs(t, env, "", "erase", "-by", "dpo", "-source", "mail", "--", "-weird")
	if code != exitNotAll || !strings.Contains(stdout, `not found: source "mail" id "-weird"`) {
		t.Errorf("id after --: exit %d\n%s", code, stdout)
	}

	code, stdout, stderr := runArgs(t, env, "m-2\n{\"source\": \"mail\", \"id\": \"m-404\"}\n",
		"erase", "-by", "dpo", "-reason", "request 118", "-source", "mail", "-ids-file", "-", "m-1", "q-1")
	if code != exitNotAll {
		t.Errorf("exit %d, want %d (some ids not erased); stderr:\n%s", code, exitNotAll, stderr)
	}
	for _, want := range []string{
		"erased 2, already erased 0, not found 1, queued 1 (of 4 ids)",
		`not found: source "mail" id "m-404"`,
		`queued: source "mail" id "q-1"`,
	} {
		if !strings.Contains(stdout, want) {
			t.Errorf("stdout does not hold %q:\n%s", want, stdout)
		}
	}
	b := bodies(ctx, t, st)
	if b["m-1"] != "" || b["m-2"] != "" || b["m-3"] == "" || b["q-1"] == "" {
		t.Errorf("bodies after erasing m-1 and m-2: %q", b)
	}

	code, stdout, _ = runArgs(t, env, "", "erase", "-by", "dpo", "-source", "mail", "-json", "m-1", "m-3")
	if code != exitOK {
		t.Errorf("exit %d, want 0", code)
	}
	var got []store.ErasureResult
	dec := json.NewDecoder(strings.NewReader(stdout))
	for dec.More() {
		var r store.ErasureResult
		if err := dec.Decode(&r); err != nil {
			t.Fatal(err)
		}
		got = append(got, r)
	}
	if len(got) != 2 || got[0].Status != store.ErasureAlreadyErased || got[1].Status != store.ErasureErased || got[1].ErasedAt == nil {
		t.Errorf("-json lines = %+v", got)
	}
}

func TestPurge(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	st := storetest.NewStore(t)
	seed(ctx, t, st, 4, 100)
	env := startup.Env{DatabaseURL: storetest.SchemaURL(t, st)}
	// Younger messages of another source stay.
	if err := st.BatchInsert(ctx, st.Pool, store.BatchInsertParams{ID: "young", SchemaID: "customer_message"}); err != nil {
		t.Fatal(err)
	}
	if _, err := st.MessageIngest(ctx, st.Pool, store.MessageIngestParams{Source: "chat", ExternalID: "y-1", Body: "hello",
		ContentHash: []byte{1}, BatchID: "young", SchemaID: "customer_message"}); err != nil {
		t.Fatal(err)
	}

	code, stdout, stderr := runArgs(t, env, "", "purge", "-older-than", "90d", "-dry-run")
	if code != exitOK || !strings.Contains(stdout, "would erase 4 messages received before") ||
		!strings.Contains(stdout, "kept 1 with a queued run, 0 with an open triage item") {
		t.Errorf("dry run: exit %d\n%s%s", code, stdout, stderr)
	}
	if b := bodies(ctx, t, st); b["m-1"] == "" {
		t.Fatal("a dry run erased")
	}
	code, stdout, stderr = runArgs(t, env, "", "purge", "-older-than", "90d", "-json")
	var res struct {
		store.PurgeResult
		DryRun bool `json:"dry_run"`
	}
	if err := json.Unmarshal([]byte(stdout), &res); err != nil || code != exitOK {
		t.Fatalf("purge: exit %d, %v\n%s%s", code, err, stdout, stderr)
	}
	if res.Erased != 4 || res.KeptQueued != 1 || res.DryRun {
		t.Errorf("purge = %+v", res)
	}
	b := bodies(ctx, t, st)
	for _, id := range []string{"m-1", "m-2", "m-3", "m-4"} {
		if b[id] != "" {
			t.Errorf("%s kept its text", id)
		}
	}
	if b["q-1"] == "" || b["y-1"] == "" {
		t.Errorf("the queued or the young message lost its text: %q", b)
	}
}

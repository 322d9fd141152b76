package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"sort"
	"strings"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/extractq/extractq/pipeline"
)

// verdict is what the harness found at the end of a run.
type verdict struct {
	// Messages is how many messages the harness generated and ingested.
	Messages int
	// Stored is how many of them Postgres holds.
	Stored int
	// Outcomes counts messages whose latest run has an outcome: a status
	// other than queued and its record (the extraction of a succeeded or
	// repaired run, the triage item of a failed one).
	Outcomes int
	// Lost = Messages - Outcomes: messages never stored, or whose latest
	// run has no outcome.
	Lost int
	// Duplicated counts runs with more than one outcome record (an
	// extraction and a triage item, or two of either) or more than one
	// current result, or whose extraction or repair call was recorded twice
	// as the run's own (the calls of two deliveries committed; the calls of
	// a delivery that did not decide the run are booked superseded), and
	// every run after a message's first: the harness asks for no re-run,
	// so a second run is a line ingested twice.
	Duplicated int
	// Unvalidated counts extractions that fail their schema (grounding
	// included) when validated again now, or that belong to a run that
	// did not end valid.
	Unvalidated int
	// Served counts the chat calls the simulator answered; Recorded the
	// llm_calls rows, superseded ones included. WastedCalls = Served -
	// Recorded: paid calls missing from the ledger (their worker was killed
	// or its commit failed before they were written).
	Served, Recorded, WastedCalls int64
	// Outcome counts by run status, and triage items by reason.
	ByStatus map[string]int
	ByReason map[string]int
	// Results counts the results stream against the outbox.
	Results resultsVerdict
}

// ok reports whether nothing was lost, duplicated or unvalidated.
func (v verdict) ok() bool {
	return v.Lost == 0 && v.Duplicated == 0 && v.Unvalidated == 0 && v.Results.ok()
}

// finalLine is the harness's last line of output.
func (v verdict) finalLine() string {
	return fmt.Sprintf("messages=%d outcomes=%d lost=%d duplicated=%d unvalidated=%d wasted_calls=%d",
		v.Messages, v.Outcomes, v.Lost, v.Duplicated, v.Unvalidated, v.WastedCalls)
}

// The checks' queries. Each message has its runs; its latest run is the
// one with the highest run_no.
const (
	outcomesSQL = `
WITH latest AS (
    SELECT DISTINCT ON (message_id) message_id, run_no, status
    FROM runs ORDER BY message_id, run_no DESC
)
SELECT count(*),
       count(*) FILTER (WHERE l.status IN ('succeeded', 'repaired') AND EXISTS (
           SELECT 1 FROM extractions e WHERE e.message_id = l.message_id AND e.run_no = l.run_no AND e.created_by = 'model')
       OR l.status IN ('failed', 'held') AND EXISTS (
           SELECT 1 FROM triage_items t WHERE t.message_id = l.message_id AND t.run_no = l.run_no))
FROM messages m LEFT JOIN latest l ON l.message_id = m.id`

	duplicatedSQL = `
SELECT count(*) FROM (
    SELECT r.message_id, r.run_no,
           (SELECT count(*) FROM extractions e WHERE e.message_id = r.message_id AND e.run_no = r.run_no) AS results,
           (SELECT count(*) FROM extractions e WHERE e.message_id = r.message_id AND e.run_no = r.run_no AND e.created_by = 'model')
         + (SELECT count(*) FROM triage_items t WHERE t.message_id = r.message_id AND t.run_no = r.run_no) AS outcomes,
           (SELECT max(n) FROM (SELECT count(*) AS n FROM llm_calls c
                                WHERE c.message_id = r.message_id AND c.run_no = r.run_no AND NOT c.superseded
                                GROUP BY c.attempt) x) AS calls_per_attempt
    FROM runs r
) d
WHERE results > 1 OR outcomes > 1 OR calls_per_attempt > 1 OR run_no > 1`

	extractionsSQL = `
SELECT e.id, e.schema_id, e.data, m.body, r.status, e.created_by
FROM extractions e
JOIN runs r ON r.message_id = e.message_id AND r.run_no = e.run_no
JOIN messages m ON m.id = e.message_id
ORDER BY e.id`

	statusSQL = `SELECT status, count(*) FROM runs GROUP BY status`
	reasonSQL = `SELECT reason, count(*) FROM triage_items GROUP BY reason`
	callsSQL  = `SELECT count(*) FROM llm_calls`
)

// checkStore computes the verdict from the private Postgres, given how
// many messages were generated and how many chat calls the simulator
// served. schemas maps a schema id to the schema results are validated
// against.
func checkStore(ctx context.Context, pool *pgxpool.Pool, schemas map[string]*pipeline.Schema, messages int, served int64) (verdict, error) {
	v := verdict{Messages: messages, Served: served, ByStatus: map[string]int{}, ByReason: map[string]int{}}
	if err := pool.QueryRow(ctx, outcomesSQL).Scan(&v.Stored, &v.Outcomes); err != nil {
		return v, fmt.Errorf("outcomes: %w", err)
	}
	v.Lost = max(0, messages-v.Outcomes)
	if err := pool.QueryRow(ctx, duplicatedSQL).Scan(&v.Duplicated); err != nil {
		return v, fmt.Errorf("duplicated: %w", err)
	}

	rows, err := pool.Query(ctx, extractionsSQL)
	if err != nil {
		return v, fmt.Errorf("extractions: %w", err)
	}
	for rows.Next() {
		var id int64
		var schemaID, body, status, createdBy string
		var data []byte
		if err := rows.Scan(&id, &schemaID, &data, &body, &status, &createdBy); err != nil {
			rows.Close()
			return v, fmt.Errorf("extractions: %w", err)
		}
		if !validResult(schemas[schemaID], data, body) ||
			(createdBy == "model" && status != "succeeded" && status != "repaired") {
			v.Unvalidated++
		}
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return v, fmt.Errorf("extractions: %w", err)
	}

	if err := pool.QueryRow(ctx, callsSQL).Scan(&v.Recorded); err != nil {
		return v, fmt.Errorf("llm_calls: %w", err)
	}
	v.WastedCalls = v.Served - v.Recorded
	for q, m := range map[string]map[string]int{statusSQL: v.ByStatus, reasonSQL: v.ByReason} {
		rows, err := pool.Query(ctx, q)
		if err != nil {
			return v, err
		}
		for rows.Next() {
			var k string
			var n int
			if err := rows.Scan(&k, &n); err != nil {
				rows.Close()
				return v, err
			}
			m[k] = n
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return v, err
		}
	}
	return v, nil
}

// validResult reports whether a stored result decodes strictly and passes
// its schema, grounding in text included.
func validResult(s *pipeline.Schema, data []byte, text string) bool {
	if s == nil {
		return false
	}
	inst, err := pipeline.DecodeStrict(data)
	if err != nil {
		return false
	}
	errs, _ := s.Validate(inst, text)
	return len(errs) == 0
}

// countLogMessages counts the warn and error lines of JSON log files by
// their message, so the harness can say how the services met the faults.
func countLogMessages(paths []string) map[string]int {
	counts := map[string]int{}
	for _, p := range paths {
		f, err := os.Open(p)
		if err != nil {
			continue
		}
		sc := bufio.NewScanner(f)
		sc.Buffer(make([]byte, 0, 64<<10), 4<<20)
		for sc.Scan() {
			var line struct {
				Level string `json:"level"`
				Msg   string `json:"msg"`
			}
			if json.Unmarshal(sc.Bytes(), &line) != nil {
				continue
			}
			if line.Level == "warn" || line.Level == "error" || line.Level == "fatal" || line.Level == "panic" ||
				line.Msg == outcomeExistsMsg {
				counts[line.Level+": "+line.Msg]++
			}
		}
		f.Close()
	}
	return counts
}

// outcomeExistsMsg is the worker's log line for a delivery whose run was
// committed by another delivery in the meantime: its calls were wasted.
const outcomeExistsMsg = "run outcome was committed by another delivery; acking"

// sortedCounts returns "n × key" lines, most frequent first.
func sortedCounts(m map[string]int) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool {
		if m[keys[i]] != m[keys[j]] {
			return m[keys[i]] > m[keys[j]]
		}
		return keys[i] < keys[j]
	})
	out := make([]string, len(keys))
	for i, k := range keys {
		out[i] = fmt.Sprintf("%6d × %s", m[k], k)
	}
	return out
}

// lastLineWith returns the last line of the file at path that contains
// substr, or its last line when none does.
func lastLineWith(path, substr string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return "(" + err.Error() + ")"
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	for i := len(lines) - 1; i >= 0; i-- {
		if strings.Contains(lines[i], substr) {
			return strings.TrimSpace(lines[i])
		}
	}
	return strings.TrimSpace(lines[len(lines)-1])
}

// lastErrorLog returns "msg: error" of the last error line of the JSON log
// at path, or "" when it has none.
func lastErrorLog(path string) string {
	f, err := os.Open(path)
	if err != nil {
		return ""
	}
	defer f.Close()
	last := ""
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 0, 64<<10), 4<<20)
	for sc.Scan() {
		var line struct {
			Level string `json:"level"`
			Msg   string `json:"msg"`
			Error string `json:"error"`
		}
		if json.Unmarshal(sc.Bytes(), &line) != nil || (line.Level != "error" && line.Level != "fatal" && line.Level != "panic") {
			continue
		}
		last = line.Msg
		if line.Error != "" {
			last += ": " + line.Error
		}
	}
	return last
}

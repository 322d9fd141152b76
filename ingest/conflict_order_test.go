package ingest_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/extractq/extractq/ingest"
	"github.com/extractq/extractq/ingest/ingesttest"
)

// An id given twice or more in one input with different texts keeps its
// first line's text, however many lines are recorded at once: the later
// lines are the conflicts. Lines of one key go to the same goroutine in
// line order.
func TestRunFirstLineOfAnIDWins(t *testing.T) {
	t.Parallel()
	e := ingesttest.NewEnv(t)
	const ids, rounds = 16, 3
	for _, parallel := range []int{1, 8} {
		for round := range rounds {
			var in strings.Builder
			// Each id's three texts on consecutive lines, which reach the
			// goroutines at once.
			for i := range ids {
				for k := range 3 {
					fmt.Fprintf(&in, `{"id":"p%d-r%d-%d","text":"text %d of p%d-r%d-%d"}`+"\n", parallel, round, i, k, parallel, round, i)
				}
			}
			sum, err := e.Ingest(t, strings.NewReader(in.String()), func(c *ingest.Config) { c.Parallel = parallel })
			if err != nil {
				t.Fatal(err)
			}
			if sum.Published != ids || sum.Rejected != 2*ids {
				t.Fatalf("parallel %d, round %d: published %d, rejected %d; want %d and %d", parallel, round, sum.Published, sum.Rejected, ids, 2*ids)
			}
			for _, le := range sum.Errors {
				if le.Line%3 == 1 || !strings.HasPrefix(le.Reason, "conflict:") {
					t.Errorf("parallel %d, round %d: line %d rejected (%s); want only the later lines, as conflicts", parallel, round, le.Line, le.Reason)
				}
			}
			for i := range ids {
				id := fmt.Sprintf("p%d-r%d-%d", parallel, round, i)
				var text string
				if err := e.Store.Pool.QueryRow(t.Context(), `SELECT body FROM messages WHERE external_id = $1`, id).Scan(&text); err != nil {
					t.Fatal(err)
				}
				if want := "text 0 of " + id; text != want {
					t.Errorf("parallel %d: %s stored %q, want its first line's %q", parallel, id, text, want)
				}
			}
		}
	}
}

package ingest_test

import (
	"strings"
	"testing"
	"time"

	"github.com/extractq/extractq/ingest/ingesttest"
	"github.com/extractq/extractq/store/storetest"
)

// TestBatchRecordWaitsOutPostgres: ingest starts while its link to
// Postgres is cut (an ingest run again during a network cut, as make
// chaos does); recording the batch waits for Postgres as every line's
// statements do, and the file gets in once the link is back. Before, the
// batch's insert was tried once and the ingest stopped with "recording
// batch …: connection reset by peer".
func TestBatchRecordWaitsOutPostgres(t *testing.T) {
	t.Parallel()
	e := ingesttest.NewEnv(t)
	st, p := storetest.Proxied(t, e.Store, 2)

	p.Cut()
	restored := make(chan struct{})
	go func() {
		defer close(restored)
		time.Sleep(time.Second) // the length of the cut, not a wait for a result
		p.Restore()
	}()
	cut := &ingesttest.Env{Store: st, JS: e.JS, NATS: e.NATS, Stream: e.Stream, Pub: e.Pub}
	const n = 5
	sum, err := cut.Ingest(t, strings.NewReader(ingesttest.GoodLines(n)), nil)
	<-restored
	if err != nil || sum.Published != n {
		t.Fatalf("ingest through a cut that ends after 1s: %+v, %v; want %d published", sum, err, n)
	}
}

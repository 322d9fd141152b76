package ingest_test

import (
	"context"
	"net"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"

	"github.com/extractq/extractq/ingest/ingesttest"
	"github.com/extractq/extractq/internal/tcpproxy"
	"github.com/extractq/extractq/store"
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
	u, err := url.Parse(storetest.SchemaURL(t, e.Store))
	if err != nil || (u.Scheme != "postgres" && u.Scheme != "postgresql") {
		t.Skipf("the test database is not given as a postgres:// URL: %v", err)
	}
	cc := e.Store.Pool.Config().ConnConfig
	p, err := tcpproxy.Listen(net.JoinHostPort(cc.Host, strconv.Itoa(int(cc.Port))))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	u.Host = p.Addr()
	q := u.Query()
	q.Set("pool_max_conns", "2")
	u.RawQuery = q.Encode()
	st, err := store.Open(context.Background(), u.String(), zaptest.NewLogger(t, zaptest.Level(zap.ErrorLevel)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(st.Close)

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

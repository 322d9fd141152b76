package store_test

import (
	"testing"

	"github.com/extractq/extractq/store/storetest"
)

func TestSessionDeleteExpired(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	st, tx := storetest.TestTx(ctx, t)
	_, err := tx.Exec(ctx, `INSERT INTO sessions (token, data, expiry) VALUES
		('old', '\x00', now() - interval '1 minute'), ('live', '\x00', now() + interval '1 hour')`)
	if err != nil {
		t.Fatal(err)
	}
	n, err := st.SessionDeleteExpired(ctx, tx)
	if err != nil || n != 1 {
		t.Fatalf("deleted %d, %v; want 1", n, err)
	}
	var left string
	if err := tx.QueryRow(ctx, `SELECT token FROM sessions`).Scan(&left); err != nil || left != "live" {
		t.Errorf("left %q, %v", left, err)
	}
}

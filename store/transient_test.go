package store_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/extractq/extractq/store"
)

func TestTransient(t *testing.T) {
	t.Parallel()
	for name, tc := range map[string]struct {
		err  error
		want bool
	}{
		"AdminShutdown":      {&pgconn.PgError{Code: "57P01"}, true},
		"CannotConnect":      {fmt.Errorf("wrapped: %w", &pgconn.PgError{Code: "57P03"}), true},
		"ConnectionClass":    {&pgconn.PgError{Code: "08006"}, true},
		"EOF":                {io.ErrUnexpectedEOF, true},
		"PoolerRefusesParam": {&pgconn.PgError{Code: "08P01", Message: "unsupported startup parameter: search_path"}, false},
		"UniqueViolation":    {&pgconn.PgError{Code: "23505"}, false},
		"SyntaxError":        {&pgconn.PgError{Code: "42601"}, false},
		"NotFound":           {store.ErrNotFound, false},
		"Canceled":           {context.Canceled, false},
		"Nil":                {nil, false},
	} {
		if got := store.Transient(tc.err); got != tc.want {
			t.Errorf("%s: Transient = %v, want %v", name, got, tc.want)
		}
	}
}

func TestRetry(t *testing.T) {
	t.Parallel()
	tries := 0
	err := store.Retry(context.Background(), 10*time.Second, func() error {
		tries++
		if tries < 3 {
			return &pgconn.PgError{Code: "57P01"}
		}
		return nil
	})
	if err != nil || tries != 3 {
		t.Fatalf("err %v after %d tries", err, tries)
	}
	tries = 0
	err = store.Retry(context.Background(), 10*time.Second, func() error {
		tries++
		return store.ErrConflict
	})
	if !errors.Is(err, store.ErrConflict) || tries != 1 {
		t.Fatalf("permanent error: %v after %d tries", err, tries)
	}
}

package store_test

import (
	"crypto/sha256"
	"errors"
	"testing"

	"github.com/extractq/extractq/store"
	"github.com/extractq/extractq/store/storetest"
)

func TestReviewer(t *testing.T) {
	t.Parallel()

	t.Run("AccountsAndTokens", func(t *testing.T) {
		t.Parallel()
		ctx := t.Context()
		st, tx := storetest.TestTx(ctx, t)
		if n, err := st.ReviewerCount(ctx, tx); err != nil || n != 0 {
			t.Fatalf("count = %d, %v", n, err)
		}
		for _, bad := range []string{"", "Alice", "a b", "-x", "x/y"} {
			if _, err := st.ReviewerInsert(ctx, tx, store.ReviewerInsertParams{Login: bad, PasswordHash: "h"}); err == nil {
				t.Errorf("login %q accepted", bad)
			}
		}
		r, err := st.ReviewerInsert(ctx, tx, store.ReviewerInsertParams{Login: "alice", Name: "Alice A.", PasswordHash: "$2a$hash"})
		if err != nil || r.ID == 0 || r.Login != "alice" || r.Disabled() {
			t.Fatalf("insert = %+v, %v", r, err)
		}
		err = savepoint(ctx, t, tx, func(db store.DBTX) error {
			_, err := st.ReviewerInsert(ctx, db, store.ReviewerInsertParams{Login: "alice", PasswordHash: "h"})
			return err
		})
		if !errors.Is(err, store.ErrConflict) {
			t.Errorf("duplicate login: %v", err)
		}
		if err := st.ReviewerSetPassword(ctx, tx, "alice", "$2a$new"); err != nil {
			t.Fatal(err)
		}
		got, err := st.ReviewerGetByLogin(ctx, tx, "alice")
		if err != nil || got.PasswordHash != "$2a$new" || got.Name != "Alice A." {
			t.Fatalf("get = %+v, %v", got, err)
		}
		if _, err := st.ReviewerGetByLogin(ctx, tx, "nobody"); !errors.Is(err, store.ErrNotFound) {
			t.Errorf("unknown login: %v", err)
		}

		hash := sha256.Sum256([]byte("eqt_secret"))
		tok, err := st.APITokenInsert(ctx, tx, store.APITokenInsertParams{Login: "alice", Name: "ci", TokenHash: hash[:]})
		if err != nil || tok.Login != "alice" || tok.ID == 0 {
			t.Fatalf("token = %+v, %v", tok, err)
		}
		if _, err := st.APITokenInsert(ctx, tx, store.APITokenInsertParams{Login: "nobody", Name: "ci", TokenHash: []byte("x")}); !errors.Is(err, store.ErrNotFound) {
			t.Errorf("token of unknown login: %v", err)
		}
		who, err := st.APITokenAuthenticate(ctx, tx, hash[:])
		if err != nil || who.Login != "alice" {
			t.Fatalf("authenticate = %+v, %v", who, err)
		}
		list, err := st.APITokenList(ctx, tx, "alice")
		if err != nil || len(list) != 1 || list[0].LastUsedAt == nil {
			t.Fatalf("tokens = %+v, %v", list, err)
		}

		if err := st.ReviewerSetDisabled(ctx, tx, "alice", true); err != nil {
			t.Fatal(err)
		}
		if _, err := st.APITokenAuthenticate(ctx, tx, hash[:]); !errors.Is(err, store.ErrNotFound) {
			t.Errorf("token of a disabled reviewer: %v", err)
		}
		if n, _ := st.ReviewerCount(ctx, tx); n != 0 {
			t.Errorf("count with alice disabled = %d", n)
		}
		if err := st.ReviewerSetDisabled(ctx, tx, "alice", false); err != nil {
			t.Fatal(err)
		}
		if err := st.APITokenRevoke(ctx, tx, tok.ID); err != nil {
			t.Fatal(err)
		}
		if _, err := st.APITokenAuthenticate(ctx, tx, hash[:]); !errors.Is(err, store.ErrNotFound) {
			t.Errorf("revoked token: %v", err)
		}
		if err := st.APITokenRevoke(ctx, tx, 424242); !errors.Is(err, store.ErrNotFound) {
			t.Errorf("revoke unknown: %v", err)
		}
		if rs, err := st.ReviewerList(ctx, tx); err != nil || len(rs) != 1 {
			t.Errorf("list = %+v, %v", rs, err)
		}
	})
}

package store_test

import (
	"crypto/sha256"
	"errors"
	"testing"
	"time"

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
		if n, err := st.ReviewerSetPassword(ctx, tx, "alice", "$2a$new"); err != nil || n != 0 {
			t.Fatalf("set password = %d, %v", n, err)
		}
		got, err := st.ReviewerGetByLogin(ctx, tx, "alice")
		if err != nil || got.PasswordHash != "$2a$new" || got.Name != "Alice A." {
			t.Fatalf("get = %+v, %v", got, err)
		}
		if _, err := st.ReviewerGetByLogin(ctx, tx, "nobody"); !errors.Is(err, store.ErrNotFound) {
			t.Errorf("unknown login: %v", err)
		}

		hash := sha256.Sum256([]byte("eqt_secret"))
		tok, err := st.APITokenInsert(ctx, tx, store.APITokenInsertParams{Login: "alice", Name: "ci", TokenHash: hash[:],
			ExpiresAt: time.Now().Add(time.Hour)})
		if err != nil || tok.Login != "alice" || tok.ID == 0 {
			t.Fatalf("token = %+v, %v", tok, err)
		}
		if _, err := st.APITokenInsert(ctx, tx, store.APITokenInsertParams{Login: "nobody", Name: "ci", TokenHash: []byte("x"),
			ExpiresAt: time.Now().Add(time.Hour)}); !errors.Is(err, store.ErrNotFound) {
			t.Errorf("token of unknown login: %v", err)
		}
		who, used, err := st.APITokenAuthenticate(ctx, tx, hash[:])
		if err != nil || who.Login != "alice" || used.ID != tok.ID || used.Name != "ci" || !used.ExpiresAt.Equal(tok.ExpiresAt) {
			t.Fatalf("authenticate = %+v, %+v, %v", who, used, err)
		}
		list, err := st.APITokenList(ctx, tx, "alice")
		if err != nil || len(list) != 1 || list[0].LastUsedAt == nil {
			t.Fatalf("tokens = %+v, %v", list, err)
		}

		if n, err := st.ReviewerSetDisabled(ctx, tx, "alice", true); err != nil || n != 1 {
			t.Fatalf("disable = %d tokens revoked, %v; want 1", n, err)
		}
		if _, _, err := st.APITokenAuthenticate(ctx, tx, hash[:]); !errors.Is(err, store.ErrNotFound) {
			t.Errorf("token of a disabled reviewer: %v", err)
		}
		if n, _ := st.ReviewerCount(ctx, tx); n != 0 {
			t.Errorf("count with alice disabled = %d", n)
		}
		if n, err := st.ReviewerSetDisabled(ctx, tx, "alice", false); err != nil || n != 0 {
			t.Fatalf("enable = %d, %v", n, err)
		}
		if _, _, err := st.APITokenAuthenticate(ctx, tx, hash[:]); !errors.Is(err, store.ErrNotFound) {
			t.Errorf("a token of the disabled account works again once it is enabled: %v", err)
		}
		if err := st.APITokenRevoke(ctx, tx, tok.ID); err != nil {
			t.Fatal(err)
		}
		if err := st.APITokenRevoke(ctx, tx, 424242); !errors.Is(err, store.ErrNotFound) {
			t.Errorf("revoke unknown: %v", err)
		}
		if rs, err := st.ReviewerList(ctx, tx); err != nil || len(rs) != 1 {
			t.Errorf("list = %+v, %v", rs, err)
		}
	})

	t.Run("TokenExpiry", func(t *testing.T) {
		t.Parallel()
		ctx := t.Context()
		st := storetest.NewStore(t)
		if _, err := st.ReviewerInsert(ctx, st.Pool, store.ReviewerInsertParams{Login: "alice", PasswordHash: "$2a$hash"}); err != nil {
			t.Fatal(err)
		}
		if _, err := st.APITokenInsert(ctx, st.Pool, store.APITokenInsertParams{Login: "alice", Name: "ci", TokenHash: []byte("h0")}); err == nil {
			t.Error("a token without an expiry was accepted")
		}
		hash := sha256.Sum256([]byte("eqt_old"))
		tok, err := st.APITokenInsert(ctx, st.Pool, store.APITokenInsertParams{Login: "alice", Name: "ci", TokenHash: hash[:], ExpiresAt: time.Now().Add(time.Hour)})
		if err != nil {
			t.Fatal(err)
		}
		// Made 100 days ago with 90 days to live.
		if _, err := st.Pool.Exec(ctx, `UPDATE api_tokens SET created_at = now() - interval '100 days', expires_at = now() - interval '10 days' WHERE id = $1`, tok.ID); err != nil {
			t.Fatal(err)
		}
		_, _, err = st.APITokenAuthenticate(ctx, st.Pool, hash[:])
		var te *store.TokenExpiredError
		if !errors.Is(err, store.ErrTokenExpired) || !errors.As(err, &te) || te.TokenID != tok.ID || time.Since(te.ExpiredAt) < 9*24*time.Hour {
			t.Fatalf("expired token: %v (%+v), want a TokenExpiredError of token %d", err, te, tok.ID)
		}
		list, err := st.APITokenList(ctx, st.Pool, "alice")
		if err != nil || len(list) != 1 || !list[0].Expired(time.Now()) || list[0].LastUsedAt != nil {
			t.Errorf("list = %+v, %v; want the token expired and never used", list, err)
		}
		// Revoked and expired: unknown or revoked, not expired.
		if err := st.APITokenRevoke(ctx, st.Pool, tok.ID); err != nil {
			t.Fatal(err)
		}
		if _, _, err := st.APITokenAuthenticate(ctx, st.Pool, hash[:]); !errors.Is(err, store.ErrNotFound) {
			t.Errorf("revoked expired token: %v, want ErrNotFound", err)
		}
		// The database refuses an expiry before the creation.
		if _, err := st.APITokenInsert(ctx, st.Pool, store.APITokenInsertParams{Login: "alice", Name: "ci", TokenHash: []byte("h1"), ExpiresAt: time.Now().Add(-time.Hour)}); err == nil {
			t.Error("a token already expired when made was accepted")
		}
	})

	// A password change and a disabling end the account's sign-ins in the
	// same statement: the generation its sessions carry moves on, and its
	// live tokens are revoked; enabling brings neither back.
	t.Run("ChangesEndSignIns", func(t *testing.T) {
		t.Parallel()
		ctx := t.Context()
		st := storetest.NewStore(t)
		for _, login := range []string{"alice", "bob"} {
			if _, err := st.ReviewerInsert(ctx, st.Pool, store.ReviewerInsertParams{Login: login, PasswordHash: "$2a$hash"}); err != nil {
				t.Fatal(err)
			}
		}
		newToken := func(login, name string) []byte {
			h := sha256.Sum256([]byte(login + name))
			if _, err := st.APITokenInsert(ctx, st.Pool, store.APITokenInsertParams{Login: login, Name: name, TokenHash: h[:],
				ExpiresAt: time.Now().Add(time.Hour)}); err != nil {
				t.Fatal(err)
			}
			return h[:]
		}
		live := func(hash []byte) bool {
			_, _, err := st.APITokenAuthenticate(ctx, st.Pool, hash)
			if err != nil && !errors.Is(err, store.ErrNotFound) {
				t.Fatal(err)
			}
			return err == nil
		}
		gen := func(login string) int64 {
			r, err := st.ReviewerGetByLogin(ctx, st.Pool, login)
			if err != nil {
				t.Fatal(err)
			}
			return r.AuthGeneration
		}

		a1, a2, b1 := newToken("alice", "one"), newToken("alice", "two"), newToken("bob", "one")
		if n, err := st.ReviewerSetPassword(ctx, st.Pool, "alice", "$2a$new"); err != nil || n != 2 {
			t.Fatalf("set password = %d tokens revoked, %v; want 2", n, err)
		}
		if live(a1) || live(a2) || !live(b1) {
			t.Errorf("after alice's password change: tokens live %v %v (alice), %v (bob); want false false true", live(a1), live(a2), live(b1))
		}
		if g := gen("alice"); g != 1 {
			t.Errorf("alice's generation after a password change = %d, want 1", g)
		}
		if g := gen("bob"); g != 0 {
			t.Errorf("bob's generation = %d, want 0", g)
		}

		a3 := newToken("alice", "three")
		if n, err := st.ReviewerSetDisabled(ctx, st.Pool, "alice", true); err != nil || n != 1 {
			t.Fatalf("disable = %d, %v; want 1", n, err)
		}
		if n, err := st.ReviewerSetDisabled(ctx, st.Pool, "alice", false); err != nil || n != 0 {
			t.Fatalf("enable = %d, %v", n, err)
		}
		if live(a3) {
			t.Error("a token lives again after disable and enable")
		}
		if g := gen("alice"); g != 3 { // disabling bumps it, and enabling a disabled account once more
			t.Errorf("alice's generation after disable and enable = %d, want 3", g)
		}
		// Enabling an enabled account changes nothing.
		a4 := newToken("alice", "four")
		if n, err := st.ReviewerSetDisabled(ctx, st.Pool, "alice", false); err != nil || n != 0 || !live(a4) || gen("alice") != 3 {
			t.Errorf("enable of an enabled account = %d, %v; token live %v, generation %d", n, err, live(a4), gen("alice"))
		}
		// An account disabled while its tokens stayed live (before sign-ins
		// ended with the disabling) loses them when enabled.
		if _, err := st.Pool.Exec(ctx, `UPDATE reviewers SET disabled_at = now() WHERE login = 'bob'`); err != nil {
			t.Fatal(err)
		}
		if n, err := st.ReviewerSetDisabled(ctx, st.Pool, "bob", false); err != nil || n != 1 || live(b1) || gen("bob") != 1 {
			t.Errorf("enable of bob, disabled with a live token = %d, %v; token live %v, generation %d", n, err, live(b1), gen("bob"))
		}

		for _, err := range []error{
			func() error { _, err := st.ReviewerSetPassword(ctx, st.Pool, "nobody", "$2a$x"); return err }(),
			func() error { _, err := st.ReviewerSetDisabled(ctx, st.Pool, "nobody", true); return err }(),
			func() error { _, err := st.ReviewerSetDisabled(ctx, st.Pool, "nobody", false); return err }(),
		} {
			if !errors.Is(err, store.ErrNotFound) {
				t.Errorf("unknown login: %v, want ErrNotFound", err)
			}
		}
	})
}

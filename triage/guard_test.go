package triage_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"
	"golang.org/x/crypto/bcrypt"

	"github.com/extractq/extractq/internal/httperr"
	"github.com/extractq/extractq/store"
	"github.com/extractq/extractq/triage"
)

// TestAdminKeepsAnAdmin: the last enabled admin cannot lose the role or
// be disabled; with a second admin either goes.
func TestAdminKeepsAnAdmin(t *testing.T) {
	t.Parallel()
	b := newBundle(t, bundleOpts{})
	run := func(args ...string) (string, error) {
		var out bytes.Buffer
		err := triage.Admin(context.Background(), b.st, args, triage.AdminIO{In: strings.NewReader("a long enough password\n"),
			Out: &out, Actor: "admin:test", BcryptCost: 4})
		return out.String(), err
	}
	if _, err := run("add-reviewer", "-login", "alice", "-role", "admin", "-password-stdin"); err != nil {
		t.Fatal(err)
	}
	if _, err := run("add-reviewer", "-login", "bob", "-role", "reviewer", "-password-stdin"); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{{"set-role", "-login", "alice", "-role", "reviewer"}, {"disable", "-login", "alice"}} {
		_, err := run(args...)
		if err == nil || !strings.Contains(err.Error(), "refused: alice is the last enabled admin") ||
			!strings.Contains(err.Error(), "make another account admin first") {
			t.Errorf("%v: %v, want refused naming why", args, err)
		}
	}
	if rv, err := b.st.ReviewerGetByLogin(t.Context(), b.st.Pool, "alice"); err != nil || rv.Role != store.RoleAdmin || rv.DisabledAt != nil {
		t.Fatalf("alice after the refusals: %+v, %v; want an enabled admin", rv, err)
	}
	if _, err := run("set-role", "-login", "bob", "-role", "admin"); err != nil {
		t.Fatal(err)
	}
	if _, err := run("set-role", "-login", "alice", "-role", "reviewer"); err != nil {
		t.Errorf("demoting one of two admins: %v", err)
	}
	if _, err := run("disable", "-login", "bob"); err == nil {
		t.Error("disabling bob, now the last admin: no error")
	}
	if _, err := run("disable", "-login", "alice"); err != nil {
		t.Errorf("disabling a reviewer: %v", err)
	}
}

// TestReleaseOthersClaim: releasing an item another reviewer holds is a
// 409 with the error shape of a decision on it, and leaves the claim;
// the holder's release answers released.
func TestReleaseOthersClaim(t *testing.T) {
	t.Parallel()
	b, _ := newAliceBundle(t)
	carol := newToken(t, b, "carol")
	robot := newToken(t, b, "robot")
	id, _ := b.failedItem(t, "customer_message", albertText, albertFirst, albertRepair)
	if r := b.api(t, carol, "POST", fmt.Sprintf("/api/v1/items/%d/claim", id), ""); r.status != http.StatusOK {
		t.Fatalf("claim: %d %s", r.status, r.body)
	}
	release := fmt.Sprintf("/api/v1/items/%d/release", id)
	reject := b.api(t, robot, "POST", fmt.Sprintf("/api/v1/items/%d/reject", id), `{"reason":"spam"}`)
	r := b.api(t, robot, "POST", release, "")
	var got, want struct {
		Error struct{ Code, Message string }
	}
	_ = json.Unmarshal([]byte(reject.body), &want)
	if err := json.Unmarshal([]byte(r.body), &got); err != nil || r.status != http.StatusConflict || got.Error.Code != string(httperr.Conflict) ||
		got.Error.Message != want.Error.Message || !strings.Contains(got.Error.Message, "claimed by carol") {
		t.Fatalf("release of carol's claim: %d %s; want 409 as the reject's: %d %s", r.status, r.body, reject.status, reject.body)
	}
	if d, _ := b.st.TriageItemGet(t.Context(), b.st.Pool, id); d.Item.ClaimedBy != "carol" {
		t.Fatalf("after the refused release the item is claimed by %v, want carol", d.Item.ClaimedBy)
	}
	for _, c := range []struct {
		token, path string
		status      int
		want        string
	}{
		{carol, release, http.StatusOK, `"released":true`},
		{carol, release, http.StatusOK, `"released":false`},
		{robot, "/api/v1/items/999999/release", http.StatusNotFound, `"not_found"`},
	} {
		if r := b.api(t, c.token, "POST", c.path, ""); r.status != c.status || !strings.Contains(strings.ReplaceAll(r.body, " ", ""), c.want) {
			t.Errorf("POST %s: %d %s, want %d with %s", c.path, r.status, r.body, c.status, c.want)
		}
	}
}

// TestRunSaysNoEnabledAccounts: with every account disabled, the serving
// warning says there is no enabled account, not no account.
func TestRunSaysNoEnabledAccounts(t *testing.T) {
	t.Parallel()
	b := newBundle(t, bundleOpts{})
	b.reviewer(t, "alice", "correct horse battery")
	if _, err := b.st.ReviewerSetDisabled(t.Context(), b.st.Pool, "alice", true); err != nil {
		t.Fatal(err)
	}
	core, logs := observer.New(zapcore.InfoLevel)
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() {
		done <- triage.Run(ctx, "0.0.0.0:0", triage.Config{Store: b.st, Schemas: b.schemas, Logger: zap.New(core), BcryptCost: bcrypt.MinCost})
	}()
	deadline := time.Now().Add(30 * time.Second)
	for logs.FilterMessage("triage listening").Len() == 0 {
		if time.Now().After(deadline) {
			t.Fatal("triage did not listen within 30s")
		}
		select {
		case err := <-done:
			t.Fatalf("Run ended: %v", err)
		case <-time.After(20 * time.Millisecond):
		}
	}
	cancel()
	<-done
	warn := logs.FilterLevelExact(zapcore.WarnLevel).All()
	if len(warn) == 0 || !strings.HasPrefix(warn[0].Message, "no enabled accounts: listening on localhost only") {
		t.Errorf("warnings %+v, want one saying no enabled accounts", warn)
	}
}

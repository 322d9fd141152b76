package triage_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/extractq/extractq/triage"
)

// TestPasswordRule checks the password rule where passwords are set (the
// admin command's add-reviewer and set-password) and in CheckPassword:
// length alone is not enough, a common or guessable password is refused
// with why, and the refusal never quotes the password.
func TestPasswordRule(t *testing.T) {
	t.Parallel()
	b := newBundle(t, bundleOpts{})
	if _, err := runAdmin(t, b, "correct horse battery staple\n", "add-reviewer", "-login", "alice", "-name", "Alice Appleton", "-password-stdin"); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		password string
		want     string // in the refusal; "" for accepted
	}{
		{"aaaaaaaaaa", "too guessable"},
		{"password12", "too common"},
		{"Password123!", "too common"},
		{"P@ssw0rd2024", "l33t spelling"},
		{"qwertyuiop", "too common"},
		{"1234567890", "too common"},
		{"iloveyou12", "too common"},
		{"alicealice1", "too guessable"},
		{"extractq2024", "the account's login or name, or the product's"},
		{"short", "it has 5 characters; at least 10 are needed"},
		{strings.Repeat("long passphrase ", 5), "at most 72 are taken"},
		{"tab\tin the middle of it", "control character"},
		{"plinth mango ferry quartz", ""},
		{"Tr0ub4dor&3 staple", ""},
	} {
		for _, args := range [][]string{
			{"add-reviewer", "-login", "bob", "-name", "Bob B", "-password-stdin"},
			{"set-password", "-login", "alice", "-password-stdin"},
		} {
			out, err := runAdmin(t, b, tc.password+"\n", args...)
			switch {
			case tc.want == "" && err != nil:
				t.Errorf("admin %s with %q: %v, want it accepted", args[0], tc.password, err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Errorf("admin %s with %q: %v (%s), want a refusal saying %q", args[0], tc.password, err, out, tc.want)
			case err != nil && strings.Contains(err.Error(), tc.password):
				t.Errorf("admin %s: the refusal quotes the password: %v", args[0], err)
			}
			if args[0] == "add-reviewer" && err == nil {
				if _, err := b.st.Pool.Exec(t.Context(), `DELETE FROM reviewers WHERE login = 'bob'`); err != nil {
					t.Fatal(err)
				}
			}
		}
	}

	// The account's login and the words of its name are known words: a
	// password another account may have is refused for this one.
	if _, err := runAdmin(t, b, "quenbyrd#77\n", "add-reviewer", "-login", "bob", "-password-stdin"); err != nil {
		t.Errorf("add-reviewer bob with a password built on another login: %v", err)
	}
	for _, tc := range []struct{ password, login, name string }{
		{"quenbyrd#77", "quenbyrd", ""},
		{"zorvath19x7!", "zed", "Zed Zorvath"},
	} {
		_, err := runAdmin(t, b, tc.password+"\n", "add-reviewer", "-login", tc.login, "-name", tc.name, "-password-stdin")
		if err == nil || !strings.Contains(err.Error(), "the account's login or name") {
			t.Errorf("add-reviewer %s (%s) with %q: %v, want a refusal naming the login or name", tc.login, tc.name, tc.password, err)
		}
		if _, err := runAdmin(t, b, "", "add-reviewer", "-login", tc.login, "-name", tc.name, "-password-stdin"); err == nil {
			t.Fatal("empty password accepted")
		}
	}
	if _, err := runAdmin(t, b, "quenbyrd#77\n", "set-password", "-login", "bob", "-password-stdin"); err != nil {
		t.Errorf("set-password bob: %v", err)
	}
	if _, err := runAdmin(t, b, "bob-is-my-name!\n", "set-password", "-login", "nobody", "-password-stdin"); err == nil || !strings.Contains(err.Error(), `no reviewer "nobody"`) {
		t.Errorf("set-password of an unknown login: %v", err)
	}

	if err := triage.CheckPassword("password12"); !errors.Is(err, triage.ErrWeakPassword) {
		t.Errorf("CheckPassword: %v, want ErrWeakPassword", err)
	}
	if _, err := triage.HashPassword("aaaaaaaaaa", 4); !errors.Is(err, triage.ErrWeakPassword) {
		t.Errorf("HashPassword of a weak password: %v, want ErrWeakPassword", err)
	}
	if err := triage.CheckPassword("Margaret1955x", "margaret", "Margaret Hamilton"); err == nil {
		t.Error("a password made of the account's name and a year was accepted")
	}
}

package triage

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/xhit/go-str2duration/v2"

	"github.com/extractq/extractq/store"
)

// AdminUsage describes the admin subcommands.
const AdminUsage = `usage: triage admin COMMAND [flags]

  add-reviewer -login NAME [-name "Full Name"] [-role ROLE] [-password-stdin]
  set-role     -login NAME -role admin|reviewer|analyst
  set-password -login NAME [-password-stdin]
  disable      -login NAME      (no more logins)
  enable       -login NAME
  list                          (the accounts)
  token create -login NAME -name PURPOSE [-role ROLE] [-expires-in 90d]   (prints the token once)
  token list   [-login NAME]
  token revoke -id N

Passwords are read from the terminal (twice), or with -password-stdin from
the first line of standard input. They are stored as bcrypt hashes. A
password must have at least 10 characters (at most 72 bytes) and a zxcvbn
score of at least 3 of 4:
no common password, word, name, keyboard pattern or the login alone.

Roles: admin (accounts, tokens, bulk re-runs, the audit log, erasures,
and all a reviewer may), reviewer (works the queue), analyst (reports
only, no customer text). add-reviewer makes a reviewer, or an admin when
no account exists yet (the first account bootstraps the server).
set-role takes effect at the account's next request, and revokes its
tokens the new role does not cover. The last enabled admin can be neither
given another role nor disabled: make another account admin first.

A token acts with its role: the account's unless -role names a narrower
one (an admin's token may be of any role; a reviewer's, reviewer or
analyst), or ingest, an admin's token for the programs that feed ingest
serve (POST /v1/messages and reading batches; nothing of triage).

set-password and disable end every session and API token of the account
at once; enable lets it log in again but brings none of them back.

An API token expires -expires-in after it is made: 90d unless said (units
w, d, h, m; at most 366d). An expired token is refused (401); make a new
one.
`

// DefaultTokenLifetime is how long an API token lives unless token create
// says otherwise (-expires-in).
const DefaultTokenLifetime = 90 * 24 * time.Hour

// MaxTokenLifetime is the longest life token create gives a token: no
// token lives forever.
const MaxTokenLifetime = 366 * 24 * time.Hour

// tokenLifetime reads -expires-in: a duration in go-str2duration's units
// (w, d, h, m, s), more than 0 and at most MaxTokenLifetime.
func tokenLifetime(s string) (time.Duration, error) {
	d, err := str2duration.ParseDuration(strings.TrimSpace(s))
	switch {
	case err != nil:
		return 0, fmt.Errorf("-expires-in %q: want a duration such as 90d, 2w or 12h", s)
	case d <= 0:
		return 0, fmt.Errorf("-expires-in %q: want a duration after now, such as 90d", s)
	case d > MaxTokenLifetime:
		return 0, fmt.Errorf("-expires-in %q: at most 366d; make a new token when this one expires", s)
	}
	return d, nil
}

// AdminIO is what the admin command reads from and writes to.
type AdminIO struct {
	In  io.Reader // for -password-stdin
	Out io.Writer
	// Actor names who runs the command in the audit log, such as
	// "admin:alice" (the operating-system user).
	Actor string
	// BcryptCost is the bcrypt cost of new hashes; 0 means the default.
	BcryptCost int
	// ReadPassword prompts on the terminal without echo; nil means there
	// is no terminal, so -password-stdin is required.
	ReadPassword func(prompt string) (string, error)
}

// Admin runs the admin subcommand args (without "admin") against st:
// reviewer accounts and API tokens. Every change is audited (via cli).
func Admin(ctx context.Context, st *store.Store, args []string, aio AdminIO) error {
	if len(args) == 0 {
		//lint:ignore ST1005 the error is the usage text, which ends with a newline
		return errors.New(AdminUsage)
	}
	if aio.Actor == "" {
		aio.Actor = "admin"
	}
	a := admin{ctx: ctx, st: st, io: aio}
	switch args[0] {
	case "add-reviewer":
		return a.addReviewer(args[1:])
	case "set-password":
		return a.setPassword(args[1:])
	case "set-role":
		return a.setRole(args[1:])
	case "disable", "enable":
		return a.setDisabled(args[0], args[1:])
	case "list":
		return a.list()
	case "token":
		if len(args) < 2 {
			//lint:ignore ST1005 the error is the usage text, which ends with a newline
			return errors.New(AdminUsage)
		}
		switch args[1] {
		case "create":
			return a.tokenCreate(args[2:])
		case "list":
			return a.tokenList(args[2:])
		case "revoke":
			return a.tokenRevoke(args[2:])
		}
	case "help", "-h", "-help", "--help":
		_, _ = io.WriteString(aio.Out, AdminUsage)
		return nil
	}
	return fmt.Errorf("unknown admin command %q\n%s", strings.Join(args, " "), AdminUsage)
}

type admin struct {
	ctx context.Context
	st  *store.Store
	io  AdminIO
}

func (a admin) flags(name string) *flag.FlagSet {
	fs := flag.NewFlagSet("triage admin "+name, flag.ContinueOnError)
	fs.SetOutput(a.io.Out)
	return fs
}

// password reads a new password: from stdin's first line, or twice from
// the terminal.
func (a admin) password(fromStdin bool) (string, error) {
	if fromStdin {
		line, err := bufio.NewReader(a.io.In).ReadString('\n')
		if err != nil && !errors.Is(err, io.EOF) {
			return "", fmt.Errorf("reading the password: %w", err)
		}
		return strings.TrimRight(line, "\r\n"), nil
	}
	if a.io.ReadPassword == nil {
		return "", errors.New("no terminal to ask for the password: use -password-stdin")
	}
	p1, err := a.io.ReadPassword("Password: ")
	if err != nil {
		return "", err
	}
	p2, err := a.io.ReadPassword("Again: ")
	if err != nil {
		return "", err
	}
	if p1 != p2 {
		return "", errors.New("the passwords differ")
	}
	return p1, nil
}

func (a admin) audit(tx store.DBTX, action, reason string, after any) error {
	return a.st.AuditInsert(a.ctx, tx, store.AuditInsertParams{Actor: a.io.Actor, Via: store.ViaCLI, Action: action, Reason: reason, After: after})
}

func (a admin) addReviewer(args []string) error {
	fs := a.flags("add-reviewer")
	login := fs.String("login", "", "login: lower-case letters, digits, . _ -")
	name := fs.String("name", "", "full name, shown on pages")
	roleName := fs.String("role", "", "admin, reviewer or analyst; default reviewer, or admin for the first account")
	stdin := fs.Bool("password-stdin", false, "read the password from the first line of standard input")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if !store.ValidLogin(*login) {
		return fmt.Errorf("-login %q: want 1-63 of a-z 0-9 . _ - starting with a letter or digit", *login)
	}
	role := store.Role(*roleName)
	if *roleName == "" {
		rs, err := a.st.ReviewerList(a.ctx, a.st.Pool)
		if err != nil {
			return err
		}
		role = store.RoleReviewer
		if len(rs) == 0 {
			role = store.RoleAdmin
		}
	} else if _, err := store.ParseRole(*roleName, store.AccountRoles); err != nil {
		return fmt.Errorf("-role: %w", err)
	}
	pw, err := a.password(*stdin)
	if err != nil {
		return err
	}
	hash, err := HashPassword(pw, a.io.BcryptCost, *login, *name)
	if err != nil {
		return err
	}
	var rv store.Reviewer
	err = a.st.InTx(a.ctx, func(tx store.DBTX) error {
		var err error
		if rv, err = a.st.ReviewerInsert(a.ctx, tx, store.ReviewerInsertParams{Login: *login, Name: *name, PasswordHash: hash, Role: role}); err != nil {
			return err
		}
		return a.audit(tx, store.AuditReviewerCreate, "", map[string]any{"login": rv.Login, "name": rv.Name, "role": rv.Role})
	})
	if errors.Is(err, store.ErrConflict) {
		return fmt.Errorf("reviewer %s exists already (use set-password)", *login)
	}
	if err != nil {
		return err
	}
	fmt.Fprintf(a.io.Out, "reviewer %s created (id %d), role %s\n", rv.Login, rv.ID, rv.Role)
	return nil
}

func (a admin) setRole(args []string) error {
	fs := a.flags("set-role")
	login := fs.String("login", "", "the reviewer's login")
	roleName := fs.String("role", "", "admin, reviewer or analyst")
	if err := fs.Parse(args); err != nil {
		return err
	}
	role, err := store.ParseRole(*roleName, store.AccountRoles)
	if err != nil {
		return fmt.Errorf("-role: %w", err)
	}
	var before store.Role
	var revoked int64
	err = a.st.InTx(a.ctx, func(tx store.DBTX) error {
		err := a.keepAnAdmin(tx, *login, "its role "+string(role), func() error {
			var err error
			before, revoked, err = a.st.ReviewerSetRole(a.ctx, tx, *login, role)
			return err
		})
		if err != nil {
			return err
		}
		return a.audit(tx, store.AuditRoleSet, "", map[string]any{"login": *login, "role": role, "role_before": before,
			"tokens_revoked": revoked})
	})
	if errors.Is(err, store.ErrNotFound) {
		return fmt.Errorf("no reviewer %q", *login)
	}
	if err != nil {
		return err
	}
	s := "s"
	if revoked == 1 {
		s = ""
	}
	fmt.Fprintf(a.io.Out, "role of %s set to %s (was %s); %d API token%s of a wider role revoked\n", *login, role, before, revoked, s)
	return nil
}

func (a admin) setPassword(args []string) error {
	fs := a.flags("set-password")
	login := fs.String("login", "", "the reviewer's login")
	stdin := fs.Bool("password-stdin", false, "read the password from the first line of standard input")
	if err := fs.Parse(args); err != nil {
		return err
	}
	rv, err := a.st.ReviewerGetByLogin(a.ctx, a.st.Pool, *login)
	if errors.Is(err, store.ErrNotFound) {
		return fmt.Errorf("no reviewer %q", *login)
	} else if err != nil {
		return err
	}
	pw, err := a.password(*stdin)
	if err != nil {
		return err
	}
	hash, err := HashPassword(pw, a.io.BcryptCost, rv.Login, rv.Name)
	if err != nil {
		return err
	}
	var revoked int64
	err = a.st.InTx(a.ctx, func(tx store.DBTX) error {
		var err error
		if revoked, err = a.st.ReviewerSetPassword(a.ctx, tx, *login, hash); err != nil {
			return err
		}
		return a.audit(tx, store.AuditReviewerUpdate, "password set",
			map[string]any{"login": *login, "sessions_ended": true, "tokens_revoked": revoked})
	})
	if errors.Is(err, store.ErrNotFound) {
		return fmt.Errorf("no reviewer %q", *login)
	}
	if err != nil {
		return err
	}
	fmt.Fprintf(a.io.Out, "password of %s set; %s\n", *login, signInsEnded(revoked))
	return nil
}

func (a admin) setDisabled(cmd string, args []string) error {
	fs := a.flags(cmd)
	login := fs.String("login", "", "the reviewer's login")
	if err := fs.Parse(args); err != nil {
		return err
	}
	disabled := cmd == "disable"
	var revoked int64
	err := a.st.InTx(a.ctx, func(tx store.DBTX) error {
		err := a.keepAnAdmin(tx, *login, "disabling it", func() error {
			var err error
			revoked, err = a.st.ReviewerSetDisabled(a.ctx, tx, *login, disabled)
			return err
		})
		if err != nil {
			return err
		}
		after := map[string]any{"login": *login, "disabled": disabled, "tokens_revoked": revoked}
		if disabled {
			after["sessions_ended"] = true
		}
		return a.audit(tx, store.AuditReviewerUpdate, cmd+"d", after)
	})
	if errors.Is(err, store.ErrNotFound) {
		return fmt.Errorf("no reviewer %q", *login)
	}
	if err != nil {
		return err
	}
	if disabled {
		fmt.Fprintf(a.io.Out, "reviewer %s disabled; %s\n", *login, signInsEnded(revoked))
	} else {
		fmt.Fprintf(a.io.Out, "reviewer %s enabled; sessions and API tokens ended before stay ended (log in again, token create)\n", *login)
	}
	return nil
}

// keepAnAdmin runs change (of the account login, described by what) in
// tx and refuses it, rolling it back, when it leaves no enabled admin
// where there was one: the last admin cannot lose the role or be
// disabled, or no account could read the audit log or re-run in bulk.
// The admins are locked first (store.ReviewerLockAdmins), so two changes
// at once cannot each leave the other's admin the last and both go.
func (a admin) keepAnAdmin(tx store.DBTX, login, what string, change func() error) error {
	before, err := a.st.ReviewerLockAdmins(a.ctx, tx)
	if err != nil {
		return err
	}
	if err := change(); err != nil {
		return err
	}
	after, err := a.st.ReviewerCountByRole(a.ctx, tx, store.RoleAdmin)
	if err != nil {
		return err
	}
	if before > 0 && after == 0 {
		return fmt.Errorf("refused: %s is the last enabled admin, and %s would leave none "+
			"(an admin reads the audit log and re-runs in bulk): make another account admin first "+
			"(triage admin set-role -login NAME -role admin)", login, what)
	}
	return nil
}

// signInsEnded says what a password change or a disabling ended.
func signInsEnded(tokensRevoked int64) string {
	s := "s"
	if tokensRevoked == 1 {
		s = ""
	}
	return fmt.Sprintf("every session ended, %d API token%s revoked", tokensRevoked, s)
}

func (a admin) list() error {
	rs, err := a.st.ReviewerList(a.ctx, a.st.Pool)
	if err != nil {
		return err
	}
	tw := tabwriter.NewWriter(a.io.Out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "LOGIN\tNAME\tROLE\tCREATED\tSTATE")
	for _, r := range rs {
		state := "active"
		if r.Disabled() {
			state = "disabled " + r.DisabledAt.UTC().Format(time.DateOnly)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", r.Login, Visible(r.Name), r.Role, r.CreatedAt.UTC().Format(time.DateOnly), state)
	}
	return tw.Flush()
}

func (a admin) tokenCreate(args []string) error {
	fs := a.flags("token create")
	login := fs.String("login", "", "the reviewer the token acts as")
	name := fs.String("name", "", "what the token is for, such as nightly-rerun")
	expiresIn := fs.String("expires-in", "90d", "how long the token lives: w, d, h, m (at most 366d)")
	roleName := fs.String("role", "", "admin, reviewer, analyst or ingest; default the account's role")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *roleName != "" {
		if _, err := store.ParseRole(*roleName, store.TokenRoles); err != nil {
			return fmt.Errorf("-role: %w", err)
		}
	}
	if *name == "" {
		return errors.New("-name is required")
	}
	life, err := tokenLifetime(*expiresIn)
	if err != nil {
		return err
	}
	expires := time.Now().Add(life).Truncate(time.Second)
	token, hash := NewAPIToken()
	var t store.APIToken
	err = a.st.InTx(a.ctx, func(tx store.DBTX) error {
		var err error
		if t, err = a.st.APITokenInsert(a.ctx, tx, store.APITokenInsertParams{Login: *login, Name: *name, TokenHash: hash,
			ExpiresAt: expires, Role: store.Role(*roleName)}); err != nil {
			return err
		}
		return a.audit(tx, store.AuditTokenCreate, "", map[string]any{"login": *login, "token_id": t.ID, "name": *name,
			"expires_at": t.ExpiresAt.UTC(), "role": t.Role})
	})
	if errors.Is(err, store.ErrNotFound) {
		return fmt.Errorf("no reviewer %q", *login)
	}
	if errors.Is(err, store.ErrRoleNotCovered) {
		_, why, _ := strings.Cut(err.Error(), "): ") // after store's own prefix
		return fmt.Errorf("-role %s: %s", *roleName, why)
	}
	if err != nil {
		return err
	}
	fmt.Fprintf(a.io.Out, "token %d for %s (%s), role %s, expires %s; it is shown once:\n%s\n",
		t.ID, t.Login, t.Name, t.Role, t.ExpiresAt.UTC().Format(time.DateTime+" MST"), token)
	return nil
}

func (a admin) tokenList(args []string) error {
	fs := a.flags("token list")
	login := fs.String("login", "", "only this reviewer's tokens")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *login != "" {
		if _, err := a.st.ReviewerGetByLogin(a.ctx, a.st.Pool, *login); errors.Is(err, store.ErrNotFound) {
			return fmt.Errorf("no reviewer %q", *login)
		} else if err != nil {
			return err
		}
	}
	ts, err := a.st.APITokenList(a.ctx, a.st.Pool, *login)
	if err != nil {
		return err
	}
	tw := tabwriter.NewWriter(a.io.Out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tLOGIN\tNAME\tROLE\tCREATED\tEXPIRES\tLAST USED\tSTATE")
	now := time.Now()
	for _, t := range ts {
		used, state := "never", "live"
		if t.LastUsedAt != nil {
			used = t.LastUsedAt.UTC().Format(time.DateTime)
		}
		switch {
		case t.RevokedAt != nil:
			state = "revoked"
		case t.Expired(now):
			state = "expired"
		}
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", t.ID, t.Login, Visible(t.Name), t.Role, t.CreatedAt.UTC().Format(time.DateOnly),
			t.ExpiresAt.UTC().Format(time.DateTime), used, state)
	}
	return tw.Flush()
}

func (a admin) tokenRevoke(args []string) error {
	fs := a.flags("token revoke")
	id := fs.String("id", "", "the token's id (see token list)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	n, err := strconv.ParseInt(*id, 10, 64)
	if err != nil {
		return fmt.Errorf("-id %q: want a number", *id)
	}
	err = a.st.InTx(a.ctx, func(tx store.DBTX) error {
		if err := a.st.APITokenRevoke(a.ctx, tx, n); err != nil {
			return err
		}
		return a.audit(tx, store.AuditTokenRevoke, "", map[string]any{"token_id": n})
	})
	if errors.Is(err, store.ErrNotFound) {
		return fmt.Errorf("no token %d", n)
	}
	if err != nil {
		return err
	}
	fmt.Fprintf(a.io.Out, "token %d revoked\n", n)
	return nil
}

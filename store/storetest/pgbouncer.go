package storetest

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"

	"github.com/extractq/extractq/store"
)

// PgBouncer is a private PgBouncer (Debian's pgbouncer package) in
// transaction pooling, on a free port of 127.0.0.1, in front of one new
// database of the test Postgres server. NewPgBouncer starts it; it stops,
// and the database is dropped, when the test ends.
//
// Its [databases] section names only that database: through it, no other
// database (not even "postgres") can be reached. Clients log in with
// auth_type trust as the user of BaseURL; PgBouncer logs in to Postgres
// with that user's password from BaseURL, if any. It passes no startup
// parameter but the few it tracks, as PgBouncer does by default, so a URL
// with search_path is refused: tests through it get a database of their
// own, not a schema.
type PgBouncer struct {
	// Database is the new database's name.
	Database string
	// DirectURL reaches Database on Postgres itself, around PgBouncer.
	DirectURL string
	// URL reaches Database through PgBouncer with pooler=transaction, as
	// the product must be configured there.
	URL string
	// PlainURL reaches Database through PgBouncer without the pooler
	// parameter, so with pgx's default statement cache, which fails there.
	PlainURL string
	// Port is PgBouncer's port on 127.0.0.1.
	Port int
	// Dir holds pgbouncer.ini, userlist.txt and pgbouncer.log.
	Dir string
}

// PoolSize is PgBouncer's default_pool_size in NewPgBouncer: the server
// connections it opens to the database at most. It is below the
// product's pool (store.DefaultMaxConns), so clients share server
// connections as they do in production.
const PoolSize = 4

// PgBouncerPath returns the pgbouncer binary (on PATH, else Debian's
// /usr/sbin/pgbouncer). When there is none it skips the test, or fails it
// when CI is set: `make test` installs the package (WITH_PGBOUNCER=1
// scripts/setup.sh), so in CI the test must run.
func PgBouncerPath(t testing.TB) string {
	t.Helper()
	if p, err := exec.LookPath("pgbouncer"); err == nil {
		return p
	}
	for _, p := range []string{"/usr/sbin/pgbouncer", "/usr/local/sbin/pgbouncer"} {
		if fi, err := os.Stat(p); err == nil && !fi.IsDir() {
			return p
		}
	}
	if os.Getenv("CI") == "" {
		t.Skip("pgbouncer is not installed (apt-get install -y pgbouncer; make test installs it); set CI to make this a failure")
	}
	t.Fatal("pgbouncer is not installed, and CI is set: make test installs it (WITH_PGBOUNCER=1 scripts/setup.sh)")
	return ""
}

// NewPgBouncer creates a new database directly on the test Postgres server
// (BaseURL's), starts a PgBouncer in front of it, and waits until it
// accepts connections. PgBouncer refuses to run as root: as root it is
// started with -u postgres (or nobody, when there is no user postgres),
// after it has read its files. On failure the test log gets PgBouncer's.
func NewPgBouncer(t testing.TB) *PgBouncer {
	t.Helper()
	bin := PgBouncerPath(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	base := BaseURL()
	cfg, err := pgx.ParseConfig(base)
	if err != nil {
		t.Fatalf("storetest: parse TEST_DATABASE_URL: %v", err)
	}
	u, err := url.Parse(base)
	if err != nil || (u.Scheme != "postgres" && u.Scheme != "postgresql") {
		t.Fatalf("storetest.NewPgBouncer: TEST_DATABASE_URL must be a postgres:// URL")
	}
	b := &PgBouncer{Database: "extractq_pgb_" + randomHex(6), Dir: t.TempDir()}
	if err := createDatabase(ctx, base, b.Database); err != nil {
		t.Fatalf("storetest: create database %s: %v", b.Database, err)
	}
	t.Cleanup(func() { dropDatabase(t, base, b.Database) })

	direct := *u
	direct.Path = "/" + b.Database
	b.DirectURL = direct.String()

	user := cfg.User
	if err := os.WriteFile(filepath.Join(b.Dir, "userlist.txt"),
		[]byte(iniQuote(user)+" "+iniQuote(cfg.Password)+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	var proc *process
	for try := 0; ; try++ {
		b.Port = freePort(t)
		if err := b.writeIni(cfg); err != nil {
			t.Fatal(err)
		}
		proc, err = b.start(bin)
		if err == nil {
			break
		}
		// Another process may have taken the free port meanwhile.
		if try == 2 || !strings.Contains(b.log(), "in use") {
			t.Fatalf("storetest: start pgbouncer: %v\n%s", err, b.log())
		}
	}
	t.Cleanup(func() {
		proc.stop()
		if t.Failed() {
			t.Logf("pgbouncer log (%s):\n%s", b.Dir, b.log())
		}
	})

	through := url.URL{Scheme: "postgres", User: url.User(user), Host: net.JoinHostPort("127.0.0.1", strconv.Itoa(b.Port)), Path: "/" + b.Database}
	q := url.Values{"sslmode": {"disable"}}
	through.RawQuery = q.Encode()
	b.PlainURL = through.String()
	q.Set(store.PoolerParam, string(store.PoolerTransaction))
	through.RawQuery = q.Encode()
	b.URL = through.String()
	return b
}

// NewStore migrates b's database through PgBouncer and returns a store
// opened on b.URL, closed when the test ends. Logs go to the test log at
// warn level and above.
func (b *PgBouncer) NewStore(t testing.TB) *store.Store {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	log := zaptest.NewLogger(t, zaptest.Level(zap.WarnLevel))
	st, err := store.Open(ctx, b.URL, log)
	if err != nil {
		t.Fatalf("storetest: open through pgbouncer: %v", err)
	}
	t.Cleanup(st.Close)
	if err := store.Migrate(ctx, st.Pool, log); err != nil {
		t.Fatalf("storetest: migrate through pgbouncer: %v", err)
	}
	return st
}

func (b *PgBouncer) writeIni(cfg *pgx.ConnConfig) error {
	server := fmt.Sprintf("host=%s port=%d dbname=%s", cfg.Host, cfg.Port, b.Database)
	ini := `[databases]
` + b.Database + ` = ` + server + `

[pgbouncer]
listen_addr = 127.0.0.1
listen_port = ` + strconv.Itoa(b.Port) + `
unix_socket_dir =
auth_type = trust
auth_file = ` + filepath.Join(b.Dir, "userlist.txt") + `
pool_mode = transaction
default_pool_size = ` + strconv.Itoa(PoolSize) + `
max_client_conn = 200
query_wait_timeout = 60
logfile =
pidfile =
log_connections = 0
log_disconnections = 0
`
	return os.WriteFile(filepath.Join(b.Dir, "pgbouncer.ini"), []byte(ini), 0o600)
}

// process is a started pgbouncer; exited is closed once it has exited.
type process struct {
	cmd    *exec.Cmd
	exited chan struct{}
}

// start runs pgbouncer and waits for its port, or for it to exit.
func (b *PgBouncer) start(bin string) (*process, error) {
	logf, err := os.OpenFile(filepath.Join(b.Dir, "pgbouncer.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return nil, err
	}
	defer logf.Close()
	args := []string{filepath.Join(b.Dir, "pgbouncer.ini")}
	if os.Geteuid() == 0 {
		name := "nobody"
		if _, err := user.Lookup("postgres"); err == nil {
			name = "postgres"
		}
		args = append([]string{"-u", name}, args...)
	}
	p := &process{cmd: exec.Command(bin, args...), exited: make(chan struct{})}
	p.cmd.Stdout, p.cmd.Stderr = logf, logf
	// Its own process group, and killed with the test binary.
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := p.cmd.Start(); err != nil {
		return nil, err
	}
	go func() {
		_ = p.cmd.Wait()
		close(p.exited)
	}()
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(b.Port))
	deadline := time.Now().Add(15 * time.Second)
	for {
		select {
		case <-p.exited:
			return nil, fmt.Errorf("pgbouncer exited at start: %v", p.cmd.ProcessState)
		default:
		}
		if c, err := net.DialTimeout("tcp", addr, time.Second); err == nil {
			c.Close()
			return p, nil
		}
		if time.Now().After(deadline) {
			p.stop()
			return nil, fmt.Errorf("pgbouncer does not listen on %s after 15s", addr)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// stop ends pgbouncer with SIGTERM (immediate shutdown: its connections
// are closed at once) and kills it if it still runs after 5s.
func (p *process) stop() {
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.exited:
	case <-time.After(5 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.exited
	}
}

func (b *PgBouncer) log() string {
	out, _ := os.ReadFile(filepath.Join(b.Dir, "pgbouncer.log"))
	const tail = 8000
	if len(out) > tail {
		out = out[len(out)-tail:]
	}
	return string(out)
}

// freePort returns a port of 127.0.0.1 nobody listened on a moment ago.
func freePort(t testing.TB) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// iniQuote quotes s as PgBouncer's userlist.txt wants: in double quotes,
// with a double quote doubled.
func iniQuote(s string) string {
	return `"` + strings.ReplaceAll(s, `"`, `""`) + `"`
}

// createDatabase creates database name on base's server, directly.
// Parallel tests creating databases at once may find the template in use
// (55006) for a moment: that is retried.
func createDatabase(ctx context.Context, base, name string) error {
	if err := ensureDatabase(ctx, base); err != nil {
		return err
	}
	for {
		err := adminExec(ctx, base, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize())
		var pgErr *pgconn.PgError
		if err == nil || !errors.As(err, &pgErr) || pgErr.Code != "55006" {
			return err
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// dropDatabase drops database name, ending any connection left to it.
func dropDatabase(t testing.TB, base, name string) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := adminExec(ctx, base, "DROP DATABASE IF EXISTS "+pgx.Identifier{name}.Sanitize()+" WITH (FORCE)"); err != nil {
		t.Errorf("storetest: drop database %s: %v", name, err)
	}
}

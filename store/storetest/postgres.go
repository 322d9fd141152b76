package storetest

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/extractq/extractq/internal/pgserver"
)

// Postgres is a private Postgres server on a free port of 127.0.0.1, for
// a test that needs server settings of its own (a small
// max_connections) or must see the server's log. NewPostgres starts it;
// it stops, and its files are removed, when the test ends.
type Postgres struct {
	// Port is the server's port on 127.0.0.1.
	Port int
	// Dir holds the data directory and postgres.log.
	Dir  string
	proc *process
}

// URL reaches database db on the server as the superuser postgres.
func (pg *Postgres) URL(db string) string {
	return pgserver.URL(pg.Port, db)
}

// Log returns the server's log so far.
func (pg *Postgres) Log() string {
	out, _ := os.ReadFile(filepath.Join(pg.Dir, "postgres.log"))
	return string(out)
}

// NewPostgres initialises a cluster in a new directory (trust
// authentication, superuser postgres) and starts it with the given
// settings (name=value, as postgres -c takes them), waiting until it
// accepts connections. initdb refuses root, so as root the server runs
// as the OS user postgres. Without server binaries it skips the test, or
// fails it when CI is set (the machine that runs make test has
// Postgres). On failure the test log gets the server's log.
func NewPostgres(t testing.TB, settings ...string) *Postgres {
	t.Helper()
	bin, err := pgserver.BinDir("")
	if errors.Is(err, pgserver.ErrNoBinaries) {
		if os.Getenv("CI") == "" {
			t.Skip("no Postgres server binaries (initdb, postgres); set CI to make this a failure")
		}
		t.Fatal("no Postgres server binaries (initdb, postgres), and CI is set")
	}
	if err != nil {
		t.Fatalf("storetest.NewPostgres: %v", err)
	}
	cred, err := pgserver.Credential()
	if err != nil {
		t.Fatalf("storetest.NewPostgres: %v", err)
	}
	// t.TempDir's parents are private to root: the server's user could
	// not reach its files there.
	dir, err := os.MkdirTemp("", "extractq-pg-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := pgserver.MkdirAll(cred, dir); err != nil {
		t.Fatal(err)
	}
	pg := &Postgres{Dir: dir}
	data := filepath.Join(dir, "data")
	initdb := pgserver.InitdbArgs(bin, data)
	cmd := exec.Command(initdb[0], initdb[1:]...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("storetest.NewPostgres: initdb: %v\n%s", err, out)
	}

	for try := 0; ; try++ {
		pg.Port = freePort(t)
		args := pgserver.ServerArgs(bin, data, dir, pg.Port, append([]string{"fsync=off"}, settings...)...)
		pg.proc, err = pg.start(args, cred)
		if err == nil {
			break
		}
		if try == 2 || !strings.Contains(pg.Log(), "in use") {
			t.Fatalf("storetest.NewPostgres: %v\n%s", err, pg.Log())
		}
	}
	t.Cleanup(func() {
		// SIGINT: fast shutdown, clients disconnected.
		_ = pg.proc.cmd.Process.Signal(syscall.SIGINT)
		select {
		case <-pg.proc.exited:
		case <-time.After(30 * time.Second):
			_ = syscall.Kill(-pg.proc.cmd.Process.Pid, syscall.SIGKILL)
			<-pg.proc.exited
		}
		if t.Failed() {
			t.Logf("postgres log (port %d):\n%s", pg.Port, tail(pg.Log(), 8000))
		}
	})
	return pg
}

// start runs postgres and waits until it accepts a connection, or exits.
func (pg *Postgres) start(args []string, cred *syscall.Credential) (*process, error) {
	logf, err := os.OpenFile(filepath.Join(pg.Dir, "postgres.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o666)
	if err != nil {
		return nil, err
	}
	defer logf.Close()
	p := &process{cmd: exec.Command(args[0], args[1:]...), exited: make(chan struct{})}
	p.cmd.Stdout, p.cmd.Stderr = logf, logf
	// Its own process group, and killed with the test binary.
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL, Credential: cred}
	if err := p.cmd.Start(); err != nil {
		return nil, err
	}
	go func() {
		_ = p.cmd.Wait()
		close(p.exited)
	}()
	deadline := time.Now().Add(60 * time.Second)
	for {
		select {
		case <-p.exited:
			return nil, fmt.Errorf("postgres exited at start: %v", p.cmd.ProcessState)
		default:
		}
		err := pgserver.Accepts(context.Background(), pg.Port)
		if err == nil {
			return p, nil
		}
		if time.Now().After(deadline) {
			_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
			<-p.exited
			return nil, fmt.Errorf("postgres does not accept connections on port %d after 60s: %v", pg.Port, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func tail(s string, n int) string {
	if len(s) > n {
		return s[len(s)-n:]
	}
	return s
}

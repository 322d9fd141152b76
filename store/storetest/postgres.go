package storetest

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
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
	return fmt.Sprintf("postgres://postgres@%s/%s?sslmode=disable", net.JoinHostPort("127.0.0.1", strconv.Itoa(pg.Port)), db)
}

// Log returns the server's log so far.
func (pg *Postgres) Log() string {
	out, _ := os.ReadFile(filepath.Join(pg.Dir, "postgres.log"))
	return string(out)
}

// pgBinDirs are where Debian installs each major version's server
// binaries (<version>/bin).
const pgBinDirs = "/usr/lib/postgresql"

// pgBin returns the directory of the newest initdb and postgres under
// Debian's layout, else of initdb on PATH, else "".
func pgBin() string {
	entries, _ := os.ReadDir(pgBinDirs)
	var versions []int
	for _, e := range entries {
		if v, err := strconv.Atoi(e.Name()); err == nil {
			if _, err := os.Stat(filepath.Join(pgBinDirs, e.Name(), "bin", "postgres")); err == nil {
				versions = append(versions, v)
			}
		}
	}
	sort.Ints(versions)
	if n := len(versions); n > 0 {
		return filepath.Join(pgBinDirs, strconv.Itoa(versions[n-1]), "bin")
	}
	if p, err := exec.LookPath("initdb"); err == nil {
		return filepath.Dir(p)
	}
	return ""
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
	bin := pgBin()
	if bin == "" {
		if os.Getenv("CI") == "" {
			t.Skip("no Postgres server binaries (initdb, postgres); set CI to make this a failure")
		}
		t.Fatal("no Postgres server binaries (initdb, postgres), and CI is set")
	}
	// t.TempDir's parents are private to root: the server's user could
	// not reach its files there.
	dir, err := os.MkdirTemp("", "extractq-pg-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	var cred *syscall.Credential
	if os.Geteuid() == 0 {
		u, err := user.Lookup("postgres")
		if err != nil {
			t.Fatalf("storetest.NewPostgres: running as root, and initdb refuses root: need the OS user postgres: %v", err)
		}
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		cred = &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid), NoSetGroups: true}
		if err := os.Chown(dir, uid, gid); err != nil {
			t.Fatal(err)
		}
	}
	pg := &Postgres{Dir: dir}
	data := filepath.Join(dir, "data")
	initdb := exec.Command(filepath.Join(bin, "initdb"), "-D", data, "-A", "trust", "-U", "postgres", "-E", "UTF8", "--no-sync")
	initdb.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
	if out, err := initdb.CombinedOutput(); err != nil {
		t.Fatalf("storetest.NewPostgres: initdb: %v\n%s", err, out)
	}

	for try := 0; ; try++ {
		pg.Port = freePort(t)
		args := []string{"-D", data, "-p", strconv.Itoa(pg.Port), "-k", dir,
			"-c", "listen_addresses=127.0.0.1", "-c", "fsync=off", "-c", "logging_collector=off"}
		for _, s := range settings {
			args = append(args, "-c", s)
		}
		pg.proc, err = pg.start(filepath.Join(bin, "postgres"), args, cred)
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
func (pg *Postgres) start(bin string, args []string, cred *syscall.Credential) (*process, error) {
	logf, err := os.OpenFile(filepath.Join(pg.Dir, "postgres.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o666)
	if err != nil {
		return nil, err
	}
	defer logf.Close()
	p := &process{cmd: exec.Command(bin, args...), exited: make(chan struct{})}
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
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		conn, err := pgx.Connect(ctx, pg.URL("postgres"))
		cancel()
		if err == nil {
			conn.Close(context.Background())
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

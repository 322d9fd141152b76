package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
)

// debianPGLib is where Debian installs each Postgres major version's
// binaries (<version>/bin).
const debianPGLib = "/usr/lib/postgresql"

// findPGBin returns the directory holding initdb and postgres: dir if
// given, else the newest version under Debian's layout, else the
// directory of initdb on PATH.
func findPGBin(dir string) (string, error) {
	if dir != "" {
		return dir, checkPGBin(dir)
	}
	entries, _ := os.ReadDir(debianPGLib)
	var versions []string
	for _, e := range entries {
		if _, err := os.Stat(filepath.Join(debianPGLib, e.Name(), "bin", "postgres")); err == nil {
			versions = append(versions, e.Name())
		}
	}
	sort.Slice(versions, func(i, j int) bool { return versionLess(versions[i], versions[j]) })
	if n := len(versions); n > 0 {
		dir := filepath.Join(debianPGLib, versions[n-1], "bin")
		return dir, checkPGBin(dir)
	}
	if p, err := exec.LookPath("initdb"); err == nil {
		dir := filepath.Dir(p)
		return dir, checkPGBin(dir)
	}
	return "", errors.New("no Postgres server binaries: install postgresql (Debian: apt-get install postgresql) or pass -pg-bin")
}

func checkPGBin(dir string) error {
	for _, name := range []string{"initdb", "postgres"} {
		if _, err := os.Stat(filepath.Join(dir, name)); err != nil {
			return fmt.Errorf("-pg-bin %s: %w", dir, err)
		}
	}
	return nil
}

// versionLess orders "9.6" < "15" < "16" numerically by parts.
func versionLess(a, b string) bool {
	pa, pb := strings.Split(a, "."), strings.Split(b, ".")
	for i := 0; i < len(pa) && i < len(pb); i++ {
		na, ea := strconv.Atoi(pa[i])
		nb, eb := strconv.Atoi(pb[i])
		if ea != nil || eb != nil {
			return a < b
		}
		if na != nb {
			return na < nb
		}
	}
	return len(pa) < len(pb)
}

// pgServer is a private Postgres cluster: its own data directory, socket
// directory and port, trust auth for the superuser postgres. initdb
// refuses to run as root, so as root the cluster belongs to the OS user
// postgres.
type pgServer struct {
	bin     string
	dir     string // holds data/, sock/ and postgres.log
	port    int
	cred    *syscall.Credential
	proc    *proc
	started int // how many times start ran
}

// newPGServer makes the cluster in dir (which must exist) with initdb.
func newPGServer(ctx context.Context, bin, dir string, port int) (*pgServer, error) {
	pg := &pgServer{bin: bin, dir: dir, port: port}
	if os.Geteuid() == 0 {
		u, err := user.Lookup("postgres")
		if err != nil {
			return nil, fmt.Errorf("running as root, and initdb refuses root: need the OS user postgres: %w", err)
		}
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		pg.cred = &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid), NoSetGroups: true}
	}
	for _, d := range []string{dir, pg.sockDir()} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return nil, err
		}
		if pg.cred != nil {
			if err := os.Chown(d, int(pg.cred.Uid), int(pg.cred.Gid)); err != nil {
				return nil, err
			}
		}
	}
	p, err := startProc(procSpec{name: "initdb", logPath: pg.logPath(), dir: dir, cred: pg.cred, args: []string{
		filepath.Join(bin, "initdb"), "-D", pg.dataDir(), "-A", "trust", "-U", "postgres", "-E", "UTF8", "--no-sync",
	}})
	if err != nil {
		return nil, err
	}
	select {
	case <-p.done:
	case <-ctx.Done():
		p.kill()
		return nil, ctx.Err()
	}
	if p.err != nil {
		return nil, fmt.Errorf("initdb: %v (log %s):\n%s", p.err, pg.logPath(), tail(pg.logPath(), 15))
	}
	return pg, nil
}

func (pg *pgServer) dataDir() string { return filepath.Join(pg.dir, "data") }
func (pg *pgServer) sockDir() string { return filepath.Join(pg.dir, "sock") }
func (pg *pgServer) logPath() string { return filepath.Join(pg.dir, "postgres.log") }

// url is the connection URL of database db on the cluster.
func (pg *pgServer) url(db string) string {
	return fmt.Sprintf("postgres://postgres@127.0.0.1:%d/%s?sslmode=disable", pg.port, db)
}

// start starts the server and waits until it accepts connections.
func (pg *pgServer) start(ctx context.Context) error {
	p, err := startProc(procSpec{name: "postgres", logPath: pg.logPath(), dir: pg.dir, cred: pg.cred, args: []string{
		filepath.Join(pg.bin, "postgres"), "-D", pg.dataDir(), "-p", strconv.Itoa(pg.port), "-k", pg.sockDir(),
		"-c", "listen_addresses=127.0.0.1", "-c", "max_connections=200", "-c", "logging_collector=off",
	}})
	if err != nil {
		return err
	}
	pg.proc = p
	pg.started++
	deadline := time.Now().Add(60 * time.Second)
	for {
		cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		conn, err := pgx.Connect(cctx, pg.url("postgres"))
		cancel()
		if err == nil {
			conn.Close(context.Background())
			return nil
		}
		if p.exited() {
			return fmt.Errorf("postgres exited: %s (log %s):\n%s", p.exitStatus(), pg.logPath(), tail(pg.logPath(), 15))
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("postgres not accepting connections after 60s: %v", err)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// stop shuts the server down with a fast shutdown (SIGINT: open
// transactions are rolled back, clients disconnected), or immediately if
// that takes longer than 30s.
func (pg *pgServer) stop() {
	if pg.proc == nil {
		return
	}
	// When SIGINT is not enough, stop kills the whole process group, the
	// backends with the postmaster.
	pg.proc.stop(syscall.SIGINT, 30*time.Second)
}

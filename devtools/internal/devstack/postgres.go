package devstack

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

// FindPGBin returns the directory holding initdb and postgres: dir if
// given, else the newest version under Debian's layout, else the
// directory of initdb on PATH.
func FindPGBin(dir string) (string, error) {
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

// Postgres is a private Postgres cluster: its own data directory, socket
// directory and port, trust auth for the superuser postgres. initdb
// refuses to run as root, so as root the cluster belongs to the OS user
// postgres (which must then be able to reach Dir).
type Postgres struct {
	Bin     string // directory of initdb and postgres (FindPGBin)
	Dir     string // holds data/, sock/ and postgres.log
	Port    int
	Started int // how many times Start ran
	// Settings are more server settings, each "name=value", passed as
	// -c name=value at Start.
	Settings []string

	cred *syscall.Credential
	proc *Proc
}

// NewPostgres makes the cluster in dir with initdb; the parent of dir
// must exist.
func NewPostgres(ctx context.Context, bin, dir string, port int) (*Postgres, error) {
	pg := &Postgres{Bin: bin, Dir: dir, Port: port}
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
	err := Run(ctx, Spec{Name: "initdb", LogPath: pg.LogPath(), Dir: dir, Cred: pg.cred, Args: []string{
		filepath.Join(bin, "initdb"), "-D", pg.dataDir(), "-A", "trust", "-U", "postgres", "-E", "UTF8", "--no-sync",
	}})
	if err != nil {
		return nil, err
	}
	return pg, nil
}

func (pg *Postgres) dataDir() string { return filepath.Join(pg.Dir, "data") }
func (pg *Postgres) sockDir() string { return filepath.Join(pg.Dir, "sock") }

// LogPath is the cluster's log, initdb's output included.
func (pg *Postgres) LogPath() string { return filepath.Join(pg.Dir, "postgres.log") }

// Proc is the running (or last) postmaster; nil before Start.
func (pg *Postgres) Proc() *Proc { return pg.proc }

// URL is the connection URL of database db on the cluster.
func (pg *Postgres) URL(db string) string {
	return fmt.Sprintf("postgres://postgres@%s/%s?sslmode=disable", Addr(pg.Port), db)
}

// Start starts the server and waits up to 60s until it accepts
// connections.
func (pg *Postgres) Start(ctx context.Context) error {
	args := []string{
		filepath.Join(pg.Bin, "postgres"), "-D", pg.dataDir(), "-p", strconv.Itoa(pg.Port), "-k", pg.sockDir(),
		"-c", "listen_addresses=127.0.0.1", "-c", "max_connections=200", "-c", "logging_collector=off",
	}
	for _, kv := range pg.Settings {
		args = append(args, "-c", kv)
	}
	p, err := Start(Spec{Name: "postgres", LogPath: pg.LogPath(), Dir: pg.Dir, Cred: pg.cred, Args: args})
	if err != nil {
		return err
	}
	pg.proc = p
	pg.Started++
	var lastErr error
	err = poll(ctx, p, 60*time.Second, 100*time.Millisecond, "accepting connections", func() bool {
		cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		conn, err := pgx.Connect(cctx, pg.URL("postgres"))
		if lastErr = err; err != nil {
			return false
		}
		conn.Close(context.Background())
		return true
	})
	if err != nil && lastErr != nil && !p.Exited() && ctx.Err() == nil {
		return fmt.Errorf("%w\nlast: %v", err, lastErr)
	}
	return err
}

// Stop shuts the server down with a fast shutdown (SIGINT: open
// transactions are rolled back, clients disconnected), or immediately if
// that takes longer than 30s: then the whole process group is killed, the
// backends with the postmaster.
func (pg *Postgres) Stop() {
	if pg.proc != nil {
		pg.proc.Stop(syscall.SIGINT, 30*time.Second)
	}
}

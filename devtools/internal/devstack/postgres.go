package devstack

import (
	"context"
	"fmt"
	"path/filepath"
	"syscall"
	"time"

	"github.com/extractq/extractq/internal/pgserver"
)

// FindPGBin returns the directory holding initdb and postgres: dir if
// given (-pg-bin), else the newest installed (pgserver.BinDir).
func FindPGBin(dir string) (string, error) {
	bin, err := pgserver.BinDir(dir)
	switch {
	case err != nil && dir != "":
		return "", fmt.Errorf("-pg-bin: %w", err)
	case err != nil:
		return "", fmt.Errorf("%w, or pass -pg-bin", err)
	}
	return bin, nil
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
	cred, err := pgserver.Credential()
	if err != nil {
		return nil, err
	}
	pg := &Postgres{Bin: bin, Dir: dir, Port: port, cred: cred}
	if err := pgserver.MkdirAll(cred, dir, pg.sockDir()); err != nil {
		return nil, err
	}
	err = Run(ctx, Spec{Name: "initdb", LogPath: pg.LogPath(), Dir: dir, Cred: pg.cred, Args: pgserver.InitdbArgs(bin, pg.dataDir())})
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
	return pgserver.URL(pg.Port, db)
}

// Start starts the server and waits up to 60s until it accepts
// connections.
func (pg *Postgres) Start(ctx context.Context) error {
	settings := append([]string{"max_connections=200"}, pg.Settings...)
	p, err := Start(Spec{Name: "postgres", LogPath: pg.LogPath(), Dir: pg.Dir, Cred: pg.cred, Args: pgserver.ServerArgs(pg.Bin, pg.dataDir(), pg.sockDir(), pg.Port, settings...)})
	if err != nil {
		return err
	}
	pg.proc = p
	pg.Started++
	var lastErr error
	err = poll(ctx, p, 60*time.Second, 100*time.Millisecond, "accepting connections", func() bool {
		lastErr = pgserver.Accepts(ctx, pg.Port)
		return lastErr == nil
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

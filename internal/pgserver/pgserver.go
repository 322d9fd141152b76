// Package pgserver holds what the private Postgres servers of the tests
// (store/storetest.NewPostgres) and of the development harnesses
// (devtools/internal/devstack) share: where the server binaries are, the
// OS user the server runs as, the initdb and postgres command lines, and
// the check that a server accepts connections. Each caller starts and
// stops the processes its own way.
//
// It is test and development tooling, not part of the product.
package pgserver

import (
	"context"
	"errors"
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
	"time"

	"github.com/jackc/pgx/v5"
)

// debianLib is where Debian installs each Postgres major version's
// binaries (<version>/bin).
const debianLib = "/usr/lib/postgresql"

// ErrNoBinaries is BinDir's error when no server binaries are found.
var ErrNoBinaries = errors.New("no Postgres server binaries (initdb, postgres): install postgresql (Debian: apt-get install postgresql)")

// BinDir returns the directory holding initdb and postgres: dir if given,
// else the newest version under Debian's layout, else the directory of
// initdb on PATH. The error is ErrNoBinaries when none is found, and
// names the missing file when dir (or the one found) lacks one.
func BinDir(dir string) (string, error) {
	if dir == "" {
		dir = findBinDir()
	}
	if dir == "" {
		return "", ErrNoBinaries
	}
	for _, name := range []string{"initdb", "postgres"} {
		if _, err := os.Stat(filepath.Join(dir, name)); err != nil {
			return "", fmt.Errorf("postgres binaries in %s: %w", dir, err)
		}
	}
	return dir, nil
}

func findBinDir() string {
	entries, _ := os.ReadDir(debianLib)
	var versions []string
	for _, e := range entries {
		if _, err := os.Stat(filepath.Join(debianLib, e.Name(), "bin", "postgres")); err == nil {
			versions = append(versions, e.Name())
		}
	}
	sort.Slice(versions, func(i, j int) bool { return versionLess(versions[i], versions[j]) })
	if n := len(versions); n > 0 {
		return filepath.Join(debianLib, versions[n-1], "bin")
	}
	if p, err := exec.LookPath("initdb"); err == nil {
		return filepath.Dir(p)
	}
	return ""
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

// Credential is the OS user initdb and postgres run as: nil (this
// process's) unless it runs as root, which initdb refuses; then the OS
// user postgres, an error when there is none.
func Credential() (*syscall.Credential, error) {
	if os.Geteuid() != 0 {
		return nil, nil
	}
	u, err := user.Lookup("postgres")
	if err != nil {
		return nil, fmt.Errorf("running as root, and initdb refuses root: need the OS user postgres: %w", err)
	}
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid), NoSetGroups: true}, nil
}

// MkdirAll makes each directory (mode 0700) and, with a credential, gives
// it to that user, so the server can reach its files.
func MkdirAll(cred *syscall.Credential, dirs ...string) error {
	for _, d := range dirs {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return err
		}
		if cred != nil {
			if err := os.Chown(d, int(cred.Uid), int(cred.Gid)); err != nil {
				return err
			}
		}
	}
	return nil
}

// InitdbArgs is the command line that makes a cluster in data: trust
// authentication, superuser postgres, UTF8, no sync to disk.
func InitdbArgs(bin, data string) []string {
	return []string{filepath.Join(bin, "initdb"), "-D", data, "-A", "trust", "-U", "postgres", "-E", "UTF8", "--no-sync"}
}

// ServerArgs is the command line that serves data on 127.0.0.1:port, its
// socket in sock, logging to its standard error, with the settings
// (name=value, as postgres -c takes them) added.
func ServerArgs(bin, data, sock string, port int, settings ...string) []string {
	args := []string{filepath.Join(bin, "postgres"), "-D", data, "-p", strconv.Itoa(port), "-k", sock,
		"-c", "listen_addresses=127.0.0.1", "-c", "logging_collector=off"}
	for _, s := range settings {
		args = append(args, "-c", s)
	}
	return args
}

// URL reaches database db on the server at 127.0.0.1:port as the
// superuser postgres.
func URL(port int, db string) string {
	return fmt.Sprintf("postgres://postgres@%s/%s?sslmode=disable", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), db)
}

// Accepts reports whether the server at 127.0.0.1:port accepts a
// connection within 2s: nil, or the connection's error.
func Accepts(ctx context.Context, port int) error {
	cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	conn, err := pgx.Connect(cctx, URL(port, "postgres"))
	if err != nil {
		return err
	}
	return conn.Close(context.WithoutCancel(ctx))
}

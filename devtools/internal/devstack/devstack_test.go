package devstack

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// gone reports whether pid has ended (a zombie counts as ended: only its
// parent can reap it).
func gone(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return true
	}
	// The state follows the command name in parentheses.
	s := string(b)
	if i := strings.LastIndexByte(s, ')'); i >= 0 && i+2 < len(s) {
		return s[i+2] == 'Z'
	}
	return false
}

// TestProcStopKillsTheGroup starts a shell that ignores SIGTERM and has a
// child of its own: Stop gives up on SIGTERM after the grace and kills the
// whole group, the child too.
func TestProcStopKillsTheGroup(t *testing.T) {
	t.Parallel()
	log := filepath.Join(t.TempDir(), "p.log")
	p, err := Start(Spec{Name: "stubborn", LogPath: log, Args: []string{"sh", "-c", `trap "" TERM; sleep 60 & echo "child $!"; wait`}})
	if err != nil {
		t.Fatal(err)
	}
	var child int
	for deadline := time.Now().Add(10 * time.Second); child == 0; {
		b, _ := os.ReadFile(log)
		fmt.Sscanf(string(b), "child %d", &child)
		if time.Now().After(deadline) {
			t.Fatalf("no child pid in the log: %q", b)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if p.Stop(syscall.SIGTERM, 300*time.Millisecond) {
		t.Fatal("Stop reports that SIGTERM stopped a shell that ignores it")
	}
	if !p.Exited() || p.ExitStatus() != "signal: killed" {
		t.Fatalf("after Stop: exited %v, %s", p.Exited(), p.ExitStatus())
	}
	for deadline := time.Now().Add(5 * time.Second); !gone(child); {
		if time.Now().After(deadline) {
			syscall.Kill(child, syscall.SIGKILL)
			t.Fatalf("child %d of the group survived Stop", child)
		}
		time.Sleep(20 * time.Millisecond)
	}

	q, err := Start(Spec{Name: "polite", LogPath: log, Args: []string{"sleep", "60"}})
	if err != nil {
		t.Fatal(err)
	}
	if !q.Stop(syscall.SIGTERM, 10*time.Second) || q.ExitStatus() != "signal: terminated" {
		t.Fatalf("sleep did not end on SIGTERM: %s", q.ExitStatus())
	}
}

// TestProcLog checks that a process started again on the same log appends
// to it, and that Stdout takes the standard output only.
func TestProcLog(t *testing.T) {
	t.Parallel()
	log := filepath.Join(t.TempDir(), "p.log")
	p, err := Start(Spec{Name: "first", LogPath: log, Env: []string{"DEVSTACK_TEST=one"}, Args: []string{"sh", "-c", `echo "$DEVSTACK_TEST"; echo err1 >&2`}})
	if err != nil {
		t.Fatal(err)
	}
	if p.Err() != nil || p.ExitStatus() != "exit status 0" {
		t.Fatalf("first: %v, %s", p.Err(), p.ExitStatus())
	}
	var out bytes.Buffer
	q, err := Start(Spec{Name: "second", LogPath: log, Stdout: &out, Dir: t.TempDir(), Args: []string{"sh", "-c", `echo two; echo err2 >&2`}})
	if err != nil {
		t.Fatal(err)
	}
	if q.Err() != nil {
		t.Fatal(q.Err())
	}
	b, _ := os.ReadFile(log)
	if string(b) != "one\nerr1\nerr2\n" || out.String() != "two\n" {
		t.Fatalf("log %q, stdout %q", b, out.String())
	}
	if _, err := Start(Spec{Name: "none", LogPath: log, Args: []string{filepath.Join(t.TempDir(), "missing")}}); err == nil ||
		!strings.Contains(err.Error(), "starting none") {
		t.Fatalf("starting a missing program: %v", err)
	}
}

func TestRun(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	ctx := context.Background()
	if err := Run(ctx, Spec{Name: "ok", LogPath: filepath.Join(dir, "ok.log"), Args: []string{"true"}}); err != nil {
		t.Fatal(err)
	}
	err := Run(ctx, Spec{Name: "boom", LogPath: filepath.Join(dir, "boom.log"), Args: []string{"sh", "-c", "echo it broke; exit 3"}})
	if err == nil || !strings.Contains(err.Error(), "exit status 3") || !strings.Contains(err.Error(), "it broke") {
		t.Fatalf("a failing command: %v", err)
	}
	cctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	defer cancel()
	start := time.Now()
	if err := Run(cctx, Spec{Name: "slow", LogPath: filepath.Join(dir, "slow.log"), Args: []string{"sleep", "60"}}); !errors.Is(err, context.DeadlineExceeded) ||
		time.Since(start) > 10*time.Second {
		t.Fatalf("a cancelled run: %v after %s", err, time.Since(start))
	}
}

func TestWaitPort(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	if port, err := FreePort(); err != nil || port == 5432 || port == 4222 {
		t.Fatalf("FreePort: %d, %v", port, err)
	}
	// A socket bound but not listening holds its port (no other test can
	// take it) and refuses connections, until it listens.
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer syscall.Close(fd)
	if err := syscall.Bind(fd, &syscall.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}); err != nil {
		t.Fatal(err)
	}
	sa, err := syscall.Getsockname(fd)
	if err != nil {
		t.Fatal(err)
	}
	port := sa.(*syscall.SockaddrInet4).Port
	if err := WaitPort(ctx, port, nil, 200*time.Millisecond); err == nil || !strings.Contains(err.Error(), "not listening on") {
		t.Fatalf("nothing listens: %v", err)
	}
	p, err := Start(Spec{Name: "quitter", LogPath: filepath.Join(t.TempDir(), "q.log"), Args: []string{"sh", "-c", "echo no port for you; exit 1"}})
	if err != nil {
		t.Fatal(err)
	}
	if err := WaitPort(ctx, port, p, 10*time.Second); err == nil || !strings.Contains(err.Error(), "quitter exited: exit status 1") ||
		!strings.Contains(err.Error(), "no port for you") {
		t.Fatalf("a process that exits: %v", err)
	}
	if err := syscall.Listen(fd, 8); err != nil {
		t.Fatal(err)
	}
	if err := WaitPort(ctx, port, nil, 5*time.Second); err != nil {
		t.Fatal(err)
	}
}

func TestWaitHTTP(t *testing.T) {
	t.Parallel()
	var calls atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/readyz" && calls.Add(1) > 2 {
			return
		}
		w.WriteHeader(http.StatusServiceUnavailable)
	}))
	defer srv.Close()
	ctx := context.Background()
	if err := WaitHTTP(ctx, srv.URL+"/readyz", nil, 10*time.Second); err != nil || calls.Load() != 3 {
		t.Fatalf("ready on the third call: %v after %d calls", err, calls.Load())
	}
	if err := WaitHTTP(ctx, srv.URL+"/never", nil, 300*time.Millisecond); err == nil || !strings.Contains(err.Error(), "not ready at") {
		t.Fatalf("never ready: %v", err)
	}
}

// TestNATS builds natsd, starts it privately, and finds a stream's message
// again after a restart on the same store.
func TestNATS(t *testing.T) {
	if testing.Short() {
		t.Skip("builds natsd")
	}
	t.Parallel()
	ctx := context.Background()
	repo, err := FindRepo()
	if err != nil {
		t.Fatal(err)
	}
	bin := t.TempDir()
	if err := Build(ctx, repo, bin, "./devtools/cmd/natsd"); err != nil {
		t.Fatal(err)
	}
	port, err := FreePort()
	if err != nil {
		t.Fatal(err)
	}
	n := &NATS{Bin: filepath.Join(bin, "natsd"), Dir: filepath.Join(t.TempDir(), "nats"), Port: port}
	t.Cleanup(n.Stop)
	if err := n.Start(ctx); err != nil {
		t.Fatal(err)
	}
	js := func() (*nats.Conn, jetstream.JetStream) {
		t.Helper()
		nc, err := nats.Connect(n.URL())
		if err != nil {
			t.Fatal(err)
		}
		js, err := jetstream.New(nc)
		if err != nil {
			t.Fatal(err)
		}
		return nc, js
	}
	nc, j := js()
	if _, err := j.CreateStream(ctx, jetstream.StreamConfig{Name: "KEPT", Subjects: []string{"kept.>"}, Storage: jetstream.FileStorage}); err != nil {
		t.Fatal(err)
	}
	if _, err := j.Publish(ctx, "kept.one", []byte("7")); err != nil {
		t.Fatal(err)
	}
	nc.Close()
	n.Stop()
	if !n.Proc().Exited() || n.Proc().Err() != nil {
		t.Fatalf("natsd after Stop: %s", n.Proc().ExitStatus())
	}
	if err := n.Start(ctx); err != nil {
		t.Fatal(err)
	}
	nc, j = js()
	defer nc.Close()
	s, err := j.Stream(ctx, "KEPT")
	if err != nil {
		t.Fatal(err)
	}
	info, err := s.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if info.State.Msgs != 1 || n.Started != 2 {
		t.Fatalf("after restart: %d messages, started %d", info.State.Msgs, n.Started)
	}
	if err := Build(ctx, repo, bin, "./devtools/cmd/nosuchcommand"); err == nil || !strings.Contains(err.Error(), "go build") {
		t.Fatalf("building a missing package: %v", err)
	}
}

// TestPostgres makes a private cluster with initdb, restarts it and finds
// its data again.
func TestPostgres(t *testing.T) {
	if testing.Short() {
		t.Skip("initdb takes seconds")
	}
	t.Parallel()
	bin, err := FindPGBin("")
	if err != nil {
		t.Skip(err)
	}
	dir, err := os.MkdirTemp("", "extractq-devstack-test-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	os.Chmod(dir, 0o711)
	port, err := FreePort()
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	pg, err := NewPostgres(ctx, bin, filepath.Join(dir, "pg"), port)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pg.Stop)
	query := func(sql string) int {
		t.Helper()
		conn, err := pgx.Connect(ctx, pg.URL("postgres"))
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close(ctx)
		var n int
		if err := conn.QueryRow(ctx, sql).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	if err := pg.Start(ctx); err != nil {
		t.Fatal(err)
	}
	conn, err := pgx.Connect(ctx, pg.URL("postgres"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Exec(ctx, `CREATE TABLE kept AS SELECT 7 AS n`); err != nil {
		t.Fatal(err)
	}
	conn.Close(ctx)
	pg.Stop()
	if !pg.Proc().Exited() {
		t.Fatal("postgres still runs after stop")
	}
	if err := pg.Start(ctx); err != nil {
		t.Fatal(err)
	}
	if n := query(`SELECT n FROM kept`); n != 7 || pg.Started != 2 {
		t.Fatalf("after restart: %d, started %d", n, pg.Started)
	}
}

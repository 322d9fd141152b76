package pgserver

import (
	"slices"
	"testing"
)

func TestVersionLess(t *testing.T) {
	t.Parallel()
	if !versionLess("9.6", "15") || !versionLess("15", "16") || versionLess("16", "15") || versionLess("16", "16") {
		t.Fatal("versionLess")
	}
}

// ServerArgs puts the caller's settings after the shared ones, each as a
// -c.
func TestServerArgs(t *testing.T) {
	t.Parallel()
	got := ServerArgs("/b", "/d/data", "/d/sock", 5433, "fsync=off")
	want := []string{"/b/postgres", "-D", "/d/data", "-p", "5433", "-k", "/d/sock",
		"-c", "listen_addresses=127.0.0.1", "-c", "logging_collector=off", "-c", "fsync=off"}
	if !slices.Equal(got, want) {
		t.Fatalf("ServerArgs = %q, want %q", got, want)
	}
}

func TestBinDirNamesTheMissingFile(t *testing.T) {
	t.Parallel()
	if _, err := BinDir(t.TempDir()); err == nil {
		t.Fatal("BinDir of an empty directory: no error")
	}
}

package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/extractq/extractq/ingest/ingesttest"
)

func TestIngestFileEmptyInput(t *testing.T) {
	t.Parallel()
	e := ingesttest.NewEnv(t)
	env, configPath, _ := commandSetup(t, e, 0)
	dir := t.TempDir()
	for _, tt := range ingesttest.EmptyInputs {
		file := filepath.Join(dir, tt.File)
		if err := os.WriteFile(file, []byte(tt.In), 0o600); err != nil {
			t.Fatal(err)
		}
		for _, json := range []bool{false, true} {
			o := fileOptions{File: file, ConfigPath: configPath, JSON: json, Quiet: true, Wait: true}
			code, stdout, stderr := runCommand(t, o, env)
			want := "ingest: " + file + " holds no messages (" + tt.Reason + "); no batch was recorded\n"
			if code != exitNothingIngested || stderr != want || stdout != "" {
				t.Errorf("%s (-json %v): exit %d, stdout %q, stderr %q; want exit %d, no report, stderr %q",
					tt.Name, json, code, stdout, stderr, exitNothingIngested, want)
			}
		}
	}
	// A bad header is still a bad header, records or not.
	file := filepath.Join(dir, "noid.csv")
	if err := os.WriteFile(file, []byte("ticket,text\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	code, _, stderr := runCommand(t, fileOptions{File: file, ConfigPath: configPath, Quiet: true}, env)
	if code != exitError || !strings.Contains(stderr, `ingest: stopped: CSV header: no "id" column`) {
		t.Errorf("header without id, no records: exit %d, stderr %q; want exit 1 and the header error", code, stderr)
	}
	if n := e.CountSQL(t, `SELECT count(*) FROM batches`); n != 0 {
		t.Errorf("%d batches recorded, want 0", n)
	}
}

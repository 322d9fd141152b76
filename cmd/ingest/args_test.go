package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"
)

// Arguments the file command refuses before it connects: each says why.
func TestFileArguments(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		args []string
		want string
	}{
		{"a flag after the file", []string{"k4.jsonl", "-wait"},
			"ingest: flag -wait comes after the file k4.jsonl: flags must come before the file (ingest -wait k4.jsonl)\n"},
		{"flags both sides", []string{"-json", "k4.jsonl", "-timeout", "5m", "-wait"},
			"ingest: flag -timeout comes after the file k4.jsonl: flags must come before the file (ingest -json -timeout 5m -wait k4.jsonl)\n"},
		{"after stdin", []string{"-", "--json"},
			"ingest: flag --json comes after the file -: flags must come before the file (ingest --json -)\n"},
		{"a file name to quote", []string{"my file.jsonl", "-wait"},
			"ingest: flag -wait comes after the file 'my file.jsonl': flags must come before the file (ingest -wait 'my file.jsonl')\n"},
		{"two files", []string{"a.jsonl", "b.jsonl"}, "ingest: one FILE is read at a time; got 2: a.jsonl b.jsonl\n"},
		{"no file", []string{"-json"}, "ingest: no FILE given (- reads stdin)\n"},
		{"-parallel 0", []string{"-parallel", "0", "k4.jsonl"},
			"ingest: -parallel must be 1 or more (how many lines are recorded and published at once; default 8), got 0\n"},
		{"-parallel below 0", []string{"-parallel=-3", "k4.jsonl"},
			"ingest: -parallel must be 1 or more (how many lines are recorded and published at once; default 8), got -3\n"},
		// A timeout of 0 or less was no timeout: -wait waited for ever.
		{"-timeout 0", []string{"-wait", "-timeout", "0s", "k4.jsonl"},
			"ingest: -timeout must be above 0 (how long -wait waits; default 10m), got 0s\n"},
		{"-timeout below 0", []string{"-wait", "-timeout=-1m", "k4.jsonl"},
			"ingest: -timeout must be above 0 (how long -wait waits; default 10m), got -1m0s\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			// Bounded: an argument let through would try to connect.
			ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
			defer cancel()
			var stdout, stderr bytes.Buffer
			code := run(ctx, tt.args, nowhere, "", &stdout, &stderr)
			if code != exitUsage || !strings.HasPrefix(stderr.String(), tt.want) || stdout.Len() != 0 {
				t.Errorf("ingest %s: exit %d, stdout %q, stderr\n%s\nwant exit %d and stderr starting with\n%s",
					strings.Join(tt.args, " "), code, stdout.String(), stderr.String(), exitUsage, tt.want)
			}
			if strings.Count(stderr.String(), "\n") > 4 {
				t.Errorf("stderr has the whole usage; want the reason and the synopsis:\n%s", stderr.String())
			}
		})
	}
}

package main

import (
	"strings"
	"testing"

	"github.com/extractq/extractq/ingest"
)

// TestTextReportSaysSimulatorFigures: the text report of a batch run on
// the LLM simulator says so before its first figure; a model's does not.
func TestTextReportSaysSimulatorFigures(t *testing.T) {
	t.Parallel()
	for _, simulated := range []bool{true, false} {
		var out strings.Builder
		writeTextReport(&out, ingest.Report{BatchID: "b", Lines: 1, Published: 1, Succeeded: 1, LLMCalls: 1, Simulated: simulated}, true)
		head, _, _ := strings.Cut(out.String(), "outcomes:")
		if strings.Contains(head, "SIMULATOR FIGURES") != simulated {
			t.Errorf("simulated %v: report\n%s", simulated, out.String())
		}
	}
}

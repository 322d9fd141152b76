package worker_test

import (
	"testing"

	"github.com/extractq/extractq/config"
	"github.com/extractq/extractq/pipeline"
	"github.com/extractq/extractq/worker"
)

// TestLoadSchemasRendering: a schema configured with the compact
// rendering sends it and records a prompt version of its own; the other
// stays full.
func TestLoadSchemasRendering(t *testing.T) {
	t.Parallel()
	cfg, err := config.Parse([]byte("schemas:\n  - {id: customer_message, file: customer_message.v1.json, rendering: compact}\n" +
		"  - {id: return_request, file: return_request.v1.json}\n"))
	if err != nil {
		t.Fatal(err)
	}
	entries, err := worker.LoadSchemas(cfg)
	if err != nil {
		t.Fatal(err)
	}
	c, f := entries["customer_message"], entries["return_request"]
	if c.Schema.Rendering != pipeline.CompactRenderingVersion || c.Prompt.Version != "extract.v1+"+pipeline.CompactRenderingVersion {
		t.Errorf("compact: rendering %q, prompt %q", c.Schema.Rendering, c.Prompt.Version)
	}
	if f.Schema.Rendering != "" || f.Prompt.Version != "extract.v1" {
		t.Errorf("full: rendering %q, prompt %q", f.Schema.Rendering, f.Prompt.Version)
	}
}

package worker

import (
	"fmt"

	"github.com/extractq/extractq/config"
	"github.com/extractq/extractq/pipeline"
	"github.com/extractq/extractq/schemas"
)

// LoadSchemas compiles every schema of the configuration (cfg.Schemas),
// from the embedded schemas, with its prompt, rendering and repair strategy: the
// table of Config.Schemas. Rules are compiled with ingest.max_text_bytes
// as the bound of the message text. The error names the schema that does
// not load and, for a bad rule, the rule and the reason.
func LoadSchemas(cfg *config.Config) (map[string]SchemaEntry, error) {
	out := map[string]SchemaEntry{}
	for _, sc := range cfg.Schemas {
		s, err := pipeline.LoadSchemaOptions(schemas.FS, sc.ID, sc.File, pipeline.CompileOptions{MaxTextBytes: cfg.Ingest.MaxTextBytes})
		if err != nil {
			return nil, err
		}
		p, err := pipeline.OpenPrompt(sc.Prompt)
		if err != nil {
			return nil, fmt.Errorf("schema %s: %w", sc.ID, err)
		}
		if s, err = s.WithRendering(sc.Rendering); err != nil {
			return nil, err
		}
		out[sc.ID] = SchemaEntry{Schema: s, Prompt: p.WithRendering(s.Rendering), Repair: sc.Repair, QA: sc.QA}
	}
	return out, nil
}

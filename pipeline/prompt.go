package pipeline

import (
	"bytes"
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"text/template"

	"github.com/extractq/extractq/extracttype"
)

//go:embed prompts/*.tmpl
var promptFS embed.FS

// MaxRepairLines is the most error lines a repair prompt carries.
const MaxRepairLines = 5

// Prompt is one versioned set of prompt templates, from
// prompts/<version>.tmpl. Each file defines the templates "system",
// "user", "repair" and "repair_patch".
type Prompt struct {
	Version string
	tmpl    *template.Template
	system  *sync.Map // schema title -> rendered system turn
}

// LoadPrompt parses the embedded template file of version, such as
// "extract.v1". It returns an error naming the version when the file is
// missing or lacks a template.
func LoadPrompt(version string) (*Prompt, error) {
	t, err := template.ParseFS(promptFS, "prompts/"+version+".tmpl")
	if err != nil {
		return nil, fmt.Errorf("prompt %s: %w", version, err)
	}
	return newPrompt(version, t)
}

// ParsePrompt parses src, a template file's text, as prompt version
// version. It returns an error naming the version when src does not parse
// or lacks one of the templates "system", "user", "repair" and
// "repair_patch".
func ParsePrompt(version, src string) (*Prompt, error) {
	t, err := template.New(version).Parse(src)
	if err != nil {
		return nil, fmt.Errorf("prompt %s: %w", version, err)
	}
	return newPrompt(version, t)
}

func newPrompt(version string, t *template.Template) (*Prompt, error) {
	t.Option("missingkey=error")
	for _, name := range []string{"system", "user", "repair", "repair_patch"} {
		if t.Lookup(name) == nil {
			return nil, fmt.Errorf("prompt %s: no %q template", version, name)
		}
	}
	return &Prompt{Version: version, tmpl: t, system: new(sync.Map)}, nil
}

// WithRendering returns p for a schema sent in the rendering whose
// version is rendering (Schema.Rendering): p itself when rendering is
// "", else a Prompt with the same templates whose Version is p's
// followed by "+" and rendering ("extract.v1+schema.compact.v1"), so
// every call records which rendering it sent.
func (p *Prompt) WithRendering(rendering string) *Prompt {
	if rendering == "" {
		return p
	}
	return &Prompt{Version: p.Version + "+" + rendering, tmpl: p.tmpl, system: new(sync.Map)}
}

// PromptFileSuffix ends the name of a prompt template file.
const PromptFileSuffix = ".tmpl"

// OpenPrompt returns the prompt that ref names: an embedded version such
// as "extract.v1" (LoadPrompt), or, when ref ends in ".tmpl", the
// template file at that path on disk, read now, whose version is its
// base name without ".tmpl" followed by "@" and the first 12 hex digits
// of the SHA-256 of its bytes ("extract.v2@3f9a0c1b2d4e"). So an edited
// file is a new version, picked up when the process next reads it
// (a restart), with no build; every call records that version. Errors
// name the file.
func OpenPrompt(ref string) (*Prompt, error) {
	if !strings.HasSuffix(ref, PromptFileSuffix) {
		return LoadPrompt(ref)
	}
	b, err := os.ReadFile(ref)
	if err != nil {
		return nil, fmt.Errorf("prompt file: %w", err)
	}
	sum := sha256.Sum256(b)
	version := strings.TrimSuffix(filepath.Base(ref), PromptFileSuffix) + "@" + hex.EncodeToString(sum[:])[:12]
	p, err := ParsePrompt(version, string(b))
	if err != nil {
		return nil, fmt.Errorf("prompt file %s: %w", ref, err)
	}
	return p, nil
}

type promptData struct {
	SchemaTitle string
	Text        string
	Errors      []string
}

func (p *Prompt) render(name string, d promptData) string {
	var b bytes.Buffer
	if err := p.tmpl.ExecuteTemplate(&b, name, d); err != nil {
		// Templates are checked at load; data fields are fixed.
		panic(fmt.Sprintf("prompt %s: %s: %v", p.Version, name, err))
	}
	return b.String()
}

// System returns the system turn. It depends on the title only, so each
// title's turn is rendered once.
func (p *Prompt) System(schemaTitle string) string {
	if p.system == nil {
		return p.render("system", promptData{SchemaTitle: schemaTitle})
	}
	if s, ok := p.system.Load(schemaTitle); ok {
		return s.(string)
	}
	s := p.render("system", promptData{SchemaTitle: schemaTitle})
	p.system.Store(schemaTitle, s)
	return s
}

// User returns the extraction turn holding the customer text, with
// NeutralizeMessage applied: the text cannot close or forge the turn's
// <message> block. Only the prompt's copy changes.
func (p *Prompt) User(text string) string {
	return p.render("user", promptData{Text: NeutralizeMessage(text)})
}

// Repair returns the repair turn: at most MaxRepairLines lines of
// "path: message" from errs (in their stable sorted order), then the
// instruction of the strategy ("regenerate" or "patch").
func (p *Prompt) Repair(errs extracttype.ErrorList, strategy string) string {
	sorted := append(extracttype.ErrorList(nil), errs...)
	sorted.Sort()
	lines := make([]string, 0, MaxRepairLines)
	for i, e := range sorted {
		if i == MaxRepairLines {
			break
		}
		lines = append(lines, strings.ReplaceAll(e.Error(), "\n", " "))
	}
	name := "repair"
	if strategy == RepairPatch {
		name = "repair_patch"
	}
	return p.render(name, promptData{Errors: lines})
}

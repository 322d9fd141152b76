package pipeline

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	openai "github.com/sashabaranov/go-openai"
)

// TestPromptStaticPrefix checks that what a call sends is the same bytes
// for every message up to the message text, and the same bytes after it:
// the instructions, the schema (response_format or the tool) and the
// request's other fields do not vary with the message, so providers'
// automatic prefix caching can serve everything before the text.
func TestPromptStaticPrefix(t *testing.T) {
	t.Parallel()
	texts := []string{
		orderText,
		"Order 4821300017: where is it? Account U85ALFLG2Z, czhang14@email.com, AB-123 45 x2, thanks",
	}
	for _, provider := range []string{ProviderGeneric, ProviderOpenAI} {
		for _, mode := range []string{ModeResponseFormat, ModeTools} {
			t.Run(provider+"/"+mode, func(t *testing.T) {
				t.Parallel()
				srv, url := newEnforcing(t, []string{validJSON}, []string{validJSON})
				cfg := openai.DefaultConfig("k")
				cfg.BaseURL = url
				prompt, err := LoadPrompt("extract.v1")
				if err != nil {
					t.Fatal(err)
				}
				ext := NewExtractor(openai.NewClientWithConfig(cfg), ExtractorConfig{
					Model: "m", Provider: provider, RequestMode: mode, MaxCompletionTokens: 256, ContextWindowTokens: 8192,
					Budget: Budget{MaxTokens: 8000, MaxCostUSD: 1},
				})
				schema := loadTestSchema(t)
				for _, text := range texts {
					if _, err := ext.Process(context.Background(), Input{Text: text, Schema: schema, Prompt: prompt, Repair: RepairRegenerate}); err != nil {
						t.Fatal(err)
					}
				}
				var prefix, suffix [][]byte
				for i, body := range srv.bodies {
					quoted, _ := json.Marshal(texts[i])
					esc := quoted[1 : len(quoted)-1] // the text as it appears inside a JSON string
					at := bytes.Index(body, esc)
					if at < 0 || bytes.Contains(body[at+1:], esc) {
						t.Fatalf("body %d holds the text %d times, want once", i, bytes.Count(body, esc))
					}
					prefix = append(prefix, body[:at])
					suffix = append(suffix, body[at+len(esc):])
				}
				if !bytes.Equal(prefix[0], prefix[1]) {
					t.Fatalf("the requests differ before the message text:\n%s\n%s", prefix[0], prefix[1])
				}
				if !bytes.Equal(suffix[0], suffix[1]) {
					t.Fatalf("the requests differ after the message text:\n%s\n%s", suffix[0], suffix[1])
				}
				// The text is in the last message, after the instructions.
				msgs := srv.requests[0].Messages
				if len(msgs) != 2 || msgs[0].Role != "system" || !bytes.Contains([]byte(msgs[1].Content), []byte(texts[0])) {
					t.Fatalf("messages %+v", msgs)
				}
			})
		}
	}
}

// A prompt file is versioned by its name and content hash: an edited file
// is a new version; a file without a template is refused, naming it.
func TestOpenPromptFile(t *testing.T) {
	src, err := promptFS.ReadFile("prompts/extract.v1.tmpl")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	path := filepath.Join(dir, "mine.tmpl")
	if err := os.WriteFile(path, src, 0o644); err != nil {
		t.Fatal(err)
	}
	p1, err := OpenPrompt(path)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(src)
	if want := "mine@" + hex.EncodeToString(sum[:])[:12]; p1.Version != want {
		t.Errorf("version %q, want %q", p1.Version, want)
	}
	embedded, _ := LoadPrompt("extract.v1")
	if p1.System("T") != embedded.System("T") {
		t.Error("the file's system turn differs from the embedded template it copies")
	}
	edited := strings.Replace(string(src), "Rules:", "Rules (edited):", 1)
	if err := os.WriteFile(path, []byte(edited), 0o644); err != nil {
		t.Fatal(err)
	}
	p2, err := OpenPrompt(path)
	if err != nil {
		t.Fatal(err)
	}
	if p2.Version == p1.Version || !strings.HasPrefix(p2.Version, "mine@") || !strings.Contains(p2.System("T"), "Rules (edited):") {
		t.Errorf("edited file: version %q (was %q), system %q: want a new version with the new text", p2.Version, p1.Version, p2.System("T"))
	}
	if err := os.WriteFile(path, []byte(`{{define "system"}}x{{end}}`), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := OpenPrompt(path); err == nil || !strings.Contains(err.Error(), path) || !strings.Contains(err.Error(), `no "user" template`) {
		t.Errorf("incomplete file: %v, want an error naming the file and the missing template", err)
	}
	if p, err := OpenPrompt("extract.v1"); err != nil || p.Version != "extract.v1" {
		t.Errorf("embedded: %v %v", p, err)
	}
}

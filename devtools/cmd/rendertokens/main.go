// Command rendertokens prints, for each configured schema and each schema
// rendering (pipeline.Renderings), the prompt tokens of an extraction
// call per message over a sample of messages, and each rendering's ratio
// to the full one. A call's prompt is counted as providers bill it: the
// system and user turns and the output schema as sent (its strict form
// under a strict provider is not counted here).
//
// Usage:
//
//	rendertokens [-config FILE] [-messages FILE] [-encoding o200k_base]
//
// Tokens are counted twice: with a real tokenizer (tiktoken's BPE ranks,
// o200k_base by default, the encoding of OpenAI's gpt-4o and later
// models; cl100k_base for gpt-4 and gpt-3.5), and as the simulator
// estimates them (a token per four code points; devtools/llmsim), which
// is what the bench and the demo report.
package main

import (
	"bufio"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"text/tabwriter"
	"unicode/utf8"

	"github.com/pkoukk/tiktoken-go"
	tiktokenloader "github.com/pkoukk/tiktoken-go-loader"

	"github.com/extractq/extractq/config"
	"github.com/extractq/extractq/pipeline"
	"github.com/extractq/extractq/worker"
)

func main() {
	cfgPath := flag.String("config", "", "configuration file whose schemas are measured (default: the built-in defaults)")
	msgPath := flag.String("messages", filepath.Join("testdata", "abcd", "messages.jsonl"), "JSONL file of messages (a \"text\" field each)")
	encoding := flag.String("encoding", "o200k_base", "tiktoken encoding: o200k_base, cl100k_base, p50k_base or r50k_base")
	flag.Parse()
	if err := run(os.Stdout, *cfgPath, *msgPath, *encoding); err != nil {
		fmt.Fprintln(os.Stderr, "rendertokens:", err)
		os.Exit(1)
	}
}

func run(out *os.File, cfgPath, msgPath, encoding string) error {
	cfg := config.Default()
	if cfgPath != "" {
		c, err := config.Load(cfgPath)
		if err != nil {
			return err
		}
		cfg = c
	}
	texts, err := readTexts(msgPath)
	if err != nil {
		return err
	}
	if len(texts) == 0 {
		return fmt.Errorf("%s: no messages", msgPath)
	}
	tiktoken.SetBpeLoader(tiktokenloader.NewOfflineLoader())
	enc, err := tiktoken.GetEncoding(encoding)
	if err != nil {
		return fmt.Errorf("encoding %s: %w", encoding, err)
	}
	count := func(s string) int { return len(enc.Encode(s, nil, nil)) }

	tw := tabwriter.NewWriter(out, 2, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "schema\trendering\tprompt version\tschema bytes\tschema tokens\tprompt tokens/msg\tratio\tsimulator estimate/msg\tratio\t\n")
	for _, sc := range cfg.Schemas {
		var fullTok, fullEst float64
		for _, r := range pipeline.Renderings {
			sc.Rendering = r
			one := *cfg
			one.Schemas = []config.Schema{sc}
			entries, err := worker.LoadSchemas(&one)
			if err != nil {
				return err
			}
			e := entries[sc.ID]
			schema := string(e.Schema.ModelSchema())
			system := e.Prompt.System(e.Schema.Title)
			fixedTok, fixedRunes := count(system)+count(schema), utf8.RuneCountInString(system)+utf8.RuneCountInString(schema)
			var tok, runes int
			for _, t := range texts {
				u := e.Prompt.User(t)
				tok += fixedTok + count(u)
				runes += fixedRunes + utf8.RuneCountInString(u)
			}
			perTok := float64(tok) / float64(len(texts))
			// The simulator rounds each call's runes up to whole tokens.
			perEst := float64(runes) / 4 / float64(len(texts))
			if r == pipeline.RenderingFull {
				fullTok, fullEst = perTok, perEst
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%d\t%.1f\t%.3f\t%.1f\t%.3f\t\n", sc.ID, r, e.Prompt.Version, len(schema), count(schema),
				perTok, perTok/fullTok, perEst, perEst/fullEst)
		}
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintf(out, "\n%d messages from %s; tokens: tiktoken %s; simulator estimate: code points / 4 (not a tokenizer)\n",
		len(texts), msgPath, encoding)
	return nil
}

func readTexts(path string) ([]string, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []string
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for n := 1; sc.Scan(); n++ {
		var l struct {
			Text string `json:"text"`
		}
		if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
			return nil, fmt.Errorf("%s:%d: %w", path, n, err)
		}
		out = append(out, l.Text)
	}
	return out, sc.Err()
}

// Command repaircompare measures, in one run, what the one repair costs in
// completion tokens under the two repair strategies, "regenerate" (the
// whole JSON again) and "patch" (RFC 6902 operations), on the nested
// return_request schema.
//
// It is a measurement of the extractq LLM simulator's behaviour, not of a
// model: it starts llmsim in-process on 127.0.0.1 with first-reply fault
// rates high enough that many messages need a repair, runs the first N
// messages through one pipeline.Extractor per strategy with the same
// simulator seed (so both strategies get identical first replies), and
// prints per strategy: messages, first-pass failures, repaired, failed
// (patch_invalid apart), repair calls, mean completion and prompt tokens
// per repair call, total cost, and the patch/regenerate ratio of
// completion tokens per repair call. Token counts are the simulator's
// estimate (a quarter of the code points), not a tokenizer's. The
// simulator's patch repair makes exactly the fixes its regenerate repair
// makes, so the outcomes of the two strategies match by construction; what
// differs is the tokens (and the patch strategy's regenerate fallback when
// the first reply holds no JSON object).
//
// Usage:
//
//	repaircompare [-file testdata/abcd/messages.jsonl] [-n 400] [-seed 1]
//	    [-invalid-json 0.02] [-wrong-type 0.15] [-missing-required 0.15]
//	    [-ungrounded 0.15] [-truncated 0] [-fenced 0] [-prose 0]
//	    [-fix-rate 0.75] [-mode response_format] [-profile generic] [-concurrency 8]
//	    [-json file] [-log-level warn]
//
// -profile is the simulator's profile (generic, openai, vllm, ollama,
// llamacpp), with the extractor set for the same server (llm.provider).
// Under a server that enforces the schema each request sends (every
// named profile), the faults that break the structure are prevented, so
// what reaches the repair is what a grammar cannot prevent (made-up ids),
// and a patch repair is answered within the patch schema.
//
// -json writes the figures as JSON to the file ("-" for stdout, instead of
// the table). Run it from the repository root for the default -file.
package main

import (
	"flag"
	"fmt"
	"os"

	"github.com/extractq/extractq/devtools/llmsim"
	"github.com/extractq/extractq/internal/startup"
	"github.com/extractq/extractq/pipeline"
)

func main() {
	var o Options
	d := DefaultRates
	flag.StringVar(&o.File, "file", "testdata/abcd/messages.jsonl", "JSONL file of {\"id\",\"text\"} messages")
	flag.IntVar(&o.N, "n", 400, "messages to run from the top of the file (0: all)")
	flag.Int64Var(&o.Seed, "seed", 1, "simulator seed, the same for both strategies")
	flag.Float64Var(&o.Rates.InvalidJSON, "invalid-json", d.InvalidJSON, "first-reply rate of invalid JSON")
	flag.Float64Var(&o.Rates.Fenced, "fenced", d.Fenced, "first-reply rate of JSON in a code fence (tolerated)")
	flag.Float64Var(&o.Rates.Prose, "prose", d.Prose, "first-reply rate of JSON inside prose (tolerated)")
	flag.Float64Var(&o.Rates.WrongType, "wrong-type", d.WrongType, "first-reply rate of one field with a wrong JSON type")
	flag.Float64Var(&o.Rates.MissingRequired, "missing-required", d.MissingRequired, "first-reply rate of one required field left out")
	flag.Float64Var(&o.Rates.Ungrounded, "ungrounded", d.Ungrounded, "first-reply rate of one made-up id")
	flag.Float64Var(&o.Rates.Truncated, "truncated", d.Truncated, "first-reply rate of a reply cut off (not repaired)")
	flag.Float64Var(&o.Rates.RepairFix, "fix-rate", d.RepairFix, "chance a repair fixes each listed error")
	flag.StringVar(&o.RequestMode, "mode", pipeline.ModeResponseFormat, "request mode: response_format or tools")
	flag.StringVar(&o.Profile, "profile", string(llmsim.ProfileGeneric), "simulator profile, and the worker's llm.provider: generic, openai, vllm, ollama or llamacpp")
	flag.IntVar(&o.Concurrency, "concurrency", 8, "messages in flight")
	jsonOut := flag.String("json", "", "also write the figures as JSON to this file (\"-\": stdout, instead of the table)")
	level := flag.String("log-level", "warn", "log level on stderr")
	flag.Parse()

	log, err := startup.NewLogger("repaircompare", *level)
	if err != nil {
		fmt.Fprintln(os.Stderr, "repaircompare:", err)
		os.Exit(2)
	}
	defer func() { _ = log.Sync() }()
	o.Logger = log

	ctx, cancel := startup.Context()
	defer cancel()
	rep, err := Run(ctx, o)
	if err != nil {
		fmt.Fprintln(os.Stderr, "repaircompare:", err)
		os.Exit(1)
	}
	if err := write(rep, *jsonOut); err != nil {
		fmt.Fprintln(os.Stderr, "repaircompare:", err)
		os.Exit(1)
	}
}

// write prints the table to stdout and the JSON to path ("-": stdout,
// instead of the table; "": none).
func write(rep *Report, path string) error {
	switch path {
	case "-":
		return rep.WriteJSON(os.Stdout)
	case "":
	default:
		f, err := os.Create(path)
		if err != nil {
			return err
		}
		if err := rep.WriteJSON(f); err != nil {
			f.Close()
			return fmt.Errorf("%s: %w", path, err)
		}
		if err := f.Close(); err != nil {
			return fmt.Errorf("%s: %w", path, err)
		}
	}
	return rep.WriteTable(os.Stdout)
}

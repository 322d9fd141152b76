// Package conformance is one suite of provider cases run against every
// server the worker may talk to, the way watermill runs one pub/sub suite
// against every implementation: a table of cases (Cases: what a model may
// answer, what a server may do) run on every target (Targets: a
// simulator profile with the worker set for it, and the mismatches), each
// case stating, as a function of the target's features, the outcome
// (succeeded, repaired, failed with which kind, nak'ed without triage),
// the number of calls and the ledger rows it must leave.
//
// The servers are the LLM simulator's profiles (devtools/llmsim:
// generic, openai, vllm, ollama, llamacpp), each replaying its server's
// wire fixtures; what a profile does is llmsim.Features, what the worker
// sends is pipeline.ProviderFeatures. A case that a target cannot produce
// (a refusal from a server that sends none) is skipped, naming the
// feature.
//
// Each case runs the real pieces in-process: the simulator on an
// httptest server, provider.Transport, pipeline.Extractor and
// worker.Worker's handler, writing to Postgres (a schema of the test
// database, store/storetest). Run it with
//
//	make conformance
//
// The table of outcomes, target by case, is in docs/providers.md
// ("Conformance"); TestConformanceTable keeps it equal to what the cases
// expect (go test ./devtools/conformance -run ConformanceTable -update
// rewrites it).
package conformance

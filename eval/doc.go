// Package eval measures how good validated records are: it scores the
// records of a batch against labelled messages, per field, and compares
// two batches (two prompt, schema or model versions) on the same
// messages with a paired test.
//
// It has no NATS and no SQL of its own: a batch's records are read
// through store (LoadBatch), and results are stored through store
// (Save). The rules it applies (label semantics, normalisation, the
// statistics) are in docs/eval.md; the summary:
//
//   - A field the label line lacks is unlabelled for that message: not
//     scored. A label key the schema lacks is not scored either.
//   - For a grounded field ("x-grounded": true), an expected value that
//     is not in the message text counts as expected-null (a grounded
//     extractor must not invent it), unless Options.RawLabels.
//   - Expected a value, predicted null: a miss (FN). Expected null,
//     predicted a value: a false positive (FP). Both values, not equal
//     after normalisation: wrong, counted as FP and FN. Equal: TP. Both
//     null: TN.
//   - A message with no model record (failed, queued, or only a
//     reviewer's record) predicts null for every field.
//
// Intervals are 95%: Wilson score intervals for precision, recall and
// exact match; a percentile bootstrap over messages (Bootstrap resamples,
// seed BootstrapSeed) for F1.
package eval

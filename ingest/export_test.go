package ingest

// SetOutcomesRead sets the hook AddOutcomes runs between reading a
// batch's counts and its versions; nil removes it.
func SetOutcomesRead(f func()) { outcomesRead = f }

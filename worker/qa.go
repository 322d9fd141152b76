package worker

import (
	"crypto/sha256"
	"encoding/binary"
	"strconv"

	"github.com/extractq/extractq/config"
	"github.com/extractq/extractq/store"
)

// QA sampling of successes (config.QA; docs/triage.md, "The QA queue"):
// each succeeded or repaired run is drawn for the QA queue when its
// outcome commits, in the outcome's transaction. The draw is a hash, not
// a random number, so every worker and every redelivery of a run draws
// the same: a run is sampled once or never, whichever delivery commits.

// QADraw returns run (messageID, runNo)'s draw in [0, 1) under seed: the
// first 53 bits of SHA-256(seed NUL message id NUL run number), as a
// fraction. The run is sampled when its draw is below its stratum's
// share; over many runs the draws are uniform, so a share s samples a
// fraction s of each stratum.
func QADraw(seed string, messageID int64, runNo int) float64 {
	h := sha256.New()
	h.Write([]byte(seed))
	h.Write([]byte{0})
	h.Write(strconv.AppendInt(nil, messageID, 10))
	h.Write([]byte{0})
	h.Write(strconv.AppendInt(nil, int64(runNo), 10))
	var sum [sha256.Size]byte
	return float64(binary.BigEndian.Uint64(h.Sum(sum[:0]))>>11) / (1 << 53)
}

// qaParams returns the QA draw of run (messageID, runNo) under q, for the
// store to sample it by its committed record's stratum; nil when q is nil
// (the schema samples none).
func qaParams(q *config.QA, messageID int64, runNo int) *store.QASampleParams {
	if q == nil {
		return nil
	}
	return &store.QASampleParams{Draw: QADraw(q.Seed, messageID, runNo), Share: q.Share, StratifyBy: q.StratifyBy, Strata: q.Strata}
}

package llmsim

import (
	"crypto/sha256"
	"encoding/binary"
	"math"
	"slices"
	"strings"

	"github.com/extractq/extractq/config"
)

// promptErrorRate returns the value error rate of the first
// config.Simulator.PromptErrors entry whose Match occurs in system (the
// request's system turns), and 0 when none does.
func promptErrorRate(entries []config.SimPromptErrors, system string) float64 {
	for _, e := range entries {
		if e.Match != "" && strings.Contains(system, e.Match) {
			return e.ValueErrorRate
		}
	}
	return 0
}

// valueErrors returns a copy of the honest record doc with value errors
// of the right shape, which validation cannot catch: each non-null
// property value (at any depth) is hit when its uniform draw is below
// rate. A hit value becomes null when its schema allows null, else
// another value of its enum; a value with neither is left alone. The draw
// of a value depends only on the seed, the message text and the value's
// path, so the same message always gets the same errors, and a higher
// rate hits a superset of what a lower one hits.
func (f *filler) valueErrors(doc any, text string, seed int64, rate float64) any {
	if rate <= 0 {
		return doc
	}
	doc = deepCopy(doc)
	for _, s := range f.sites(doc) {
		if !s.inObject || s.v == nil || valueDraw(seed, text, s.toks) >= rate {
			continue
		}
		var v any
		switch {
		case s.n.nullable:
			v = nil
		case len(s.n.enum()) > 1:
			enum := s.n.enum()
			i := slices.IndexFunc(enum, func(e any) bool { return e == s.v })
			for k := 1; k < len(enum); k++ {
				if c := enum[(i+k+len(enum))%len(enum)]; c != nil && c != s.v {
					v = c
					break
				}
			}
			if v == nil {
				continue
			}
		default:
			continue
		}
		if out, err := apply(doc, patchOp{Op: "replace", Path: joinPointer(s.toks), Value: v}); err == nil {
			doc = out
		}
	}
	return doc
}

// valueDraw is a uniform draw in [0, 1) from a hash of seed, text and the
// path's tokens.
func valueDraw(seed int64, text string, toks []string) float64 {
	h := sha256.New()
	var b [8]byte
	binary.LittleEndian.PutUint64(b[:], uint64(seed))
	h.Write(b[:])
	h.Write([]byte("value-error\x00"))
	h.Write([]byte(text))
	for _, t := range toks {
		h.Write([]byte{0})
		h.Write([]byte(t))
	}
	sum := h.Sum(nil)
	return float64(binary.LittleEndian.Uint64(sum[:8])>>11) / math.Exp2(53)
}

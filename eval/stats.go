package eval

import (
	"math"
	"math/rand/v2"
	"sort"

	"gonum.org/v1/gonum/stat/distuv"
)

// z95 is the standard normal quantile of 0.975: 95% two-sided intervals.
const z95 = 1.959963984540054

// Bootstrap is the number of resamples of each bootstrap interval, and
// BootstrapSeed the fixed seed of its generator (PCG), so the same scores
// always give the same intervals.
const (
	Bootstrap     = 2000
	BootstrapSeed = 17
)

// Metric is a proportion or F1 with its 95% interval. Defined is false
// when its denominator is 0 (no value: JSON null).
type Metric struct {
	Value, Low, High float64
	Defined          bool
}

// Wilson returns k/n with its 95% Wilson score interval (Wilson 1927;
// Agresti & Coull 1998 recommend it over the normal interval for small n
// and proportions near 0 or 1). n = 0 gives an undefined Metric.
func Wilson(k, n int) Metric {
	if n == 0 {
		return Metric{}
	}
	p := float64(k) / float64(n)
	nf := float64(n)
	z2 := z95 * z95
	den := 1 + z2/nf
	mid := (p + z2/(2*nf)) / den
	half := z95 * math.Sqrt(p*(1-p)/nf+z2/(4*nf*nf)) / den
	return Metric{Value: p, Low: math.Max(0, mid-half), High: math.Min(1, mid+half), Defined: true}
}

// f1Bootstrap returns the F1 of outs with a 95% percentile bootstrap
// interval: Bootstrap resamples of the messages with replacement (the
// generator seeded with BootstrapSeed); resamples whose F1 is 0/0 are
// left out.
func f1Bootstrap(outs []Outcome) Metric {
	var c Counts
	for _, o := range outs {
		c.add(o)
	}
	f1 := c.F1()
	if math.IsNaN(f1) {
		return Metric{}
	}
	rng := rand.New(rand.NewPCG(BootstrapSeed, BootstrapSeed))
	stats := make([]float64, 0, Bootstrap)
	for range Bootstrap {
		var r Counts
		for range outs {
			r.add(outs[rng.IntN(len(outs))])
		}
		if v := r.F1(); !math.IsNaN(v) {
			stats = append(stats, v)
		}
	}
	lo, hi := percentiles(stats)
	return Metric{Value: f1, Low: lo, High: hi, Defined: true}
}

// percentiles returns the 2.5th and 97.5th percentiles of xs (sorted in
// place), nearest rank.
func percentiles(xs []float64) (float64, float64) {
	if len(xs) == 0 {
		return math.NaN(), math.NaN()
	}
	sort.Float64s(xs)
	at := func(q float64) float64 {
		i := int(math.Ceil(q*float64(len(xs)))) - 1
		return xs[min(max(i, 0), len(xs)-1)]
	}
	return at(0.025), at(0.975)
}

// McNemarExact returns the two-sided p-value of McNemar's exact test on
// b and c, the discordant pairs (A right and B wrong; A wrong and B
// right): under the null each discordant pair is B's win with probability
// 1/2, so p = min(1, 2 P(X <= min(b,c))) for X ~ Binomial(b+c, 1/2)
// (McNemar 1947; the exact, conditional form). The binomial tail is
// gonum's (distuv.Binomial). No discordant pair gives 1.
func McNemarExact(b, c int) float64 {
	n := b + c
	if n == 0 {
		return 1
	}
	tail := distuv.Binomial{N: float64(n), P: 0.5}.CDF(float64(min(b, c)))
	return math.Min(1, 2*tail)
}

// holm returns which of ps are rejected at level alpha by Holm's
// step-down procedure (Holm 1979), which bounds the chance of flagging any
// field by chance at alpha however many fields are tested.
func holm(ps []float64, alpha float64) []bool {
	idx := make([]int, len(ps))
	for i := range idx {
		idx[i] = i
	}
	sort.SliceStable(idx, func(a, b int) bool { return ps[idx[a]] < ps[idx[b]] })
	out := make([]bool, len(ps))
	m := len(ps)
	for r, i := range idx {
		if ps[i] > alpha/float64(m-r) {
			break
		}
		out[i] = true
	}
	return out
}

package eval

import (
	"math"
	"math/rand/v2"
)

// Alpha is the level at which a comparison flags a field: Holm's
// procedure over the fields' McNemar p-values.
const Alpha = 0.05

// Comparison is two batches scored on the same label lines, side by side.
type Comparison struct {
	A, B *Report `json:"-"`
	// Paired is the number of label lines matched in both batches; every
	// figure below is over them only.
	Paired int         `json:"paired"`
	Fields []FieldDiff `json:"fields"`
}

// FieldDiff is one field of a comparison.
type FieldDiff struct {
	Field string `json:"field"`
	// N is the paired messages labelled for the field.
	N              int    `json:"n"`
	CountsA        Counts `json:"counts_a"`
	CountsB        Counts `json:"counts_b"`
	ExactA, ExactB Metric `json:"-"`
	// ExactDiff is B's exact-match share less A's.
	ExactDiff float64 `json:"exact_diff"`
	F1A, F1B  Metric  `json:"-"`
	// F1Diff is B's F1 less A's with a 95% paired bootstrap interval
	// (messages resampled in pairs).
	F1Diff Metric `json:"f1_diff"`
	// OnlyA and OnlyB are the discordant pairs: right (exact match) in A
	// only, in B only.
	OnlyA int `json:"only_a"`
	OnlyB int `json:"only_b"`
	// P is McNemar's exact two-sided p-value on OnlyA and OnlyB.
	P float64 `json:"p"`
	// Significant reports that the difference is outside the noise: P
	// rejected by Holm's procedure at Alpha over every field compared.
	Significant bool `json:"significant"`
}

// Compare pairs a's and b's label lines (the same source and id) and
// compares each field both scored. Both reports must come from the same
// fields (the same schema); a field is compared on the pairs labelled for
// it in both.
func Compare(a, b *Report) *Comparison {
	sa, sb := a.scored, b.scored
	rowB := map[string]int{}
	for i, k := range sb.Keys {
		rowB[k] = i
	}
	type pair struct{ i, j int }
	var pairs []pair
	for i, k := range sa.Keys {
		if j, ok := rowB[k]; ok {
			pairs = append(pairs, pair{i, j})
		}
	}
	colB := map[string]int{}
	for j, f := range sb.Fields {
		colB[f.Name] = j
	}
	c := &Comparison{A: a, B: b, Paired: len(pairs)}
	var ps []float64
	for fa, f := range sa.Fields {
		fb, ok := colB[f.Name]
		if !ok {
			continue
		}
		var oa, ob []Outcome
		for _, p := range pairs {
			x, y := sa.Outcomes[p.i][fa], sb.Outcomes[p.j][fb]
			if x == Unlabelled || y == Unlabelled {
				continue
			}
			oa, ob = append(oa, x), append(ob, y)
		}
		if len(oa) == 0 {
			continue
		}
		d := FieldDiff{Field: f.Name, N: len(oa)}
		for k := range oa {
			d.CountsA.add(oa[k])
			d.CountsB.add(ob[k])
			switch {
			case oa[k].Correct() && !ob[k].Correct():
				d.OnlyA++
			case !oa[k].Correct() && ob[k].Correct():
				d.OnlyB++
			}
		}
		d.ExactA, d.ExactB = Wilson(d.CountsA.Exact(), d.N), Wilson(d.CountsB.Exact(), d.N)
		d.ExactDiff = d.ExactB.Value - d.ExactA.Value
		d.F1A, d.F1B = f1Bootstrap(oa), f1Bootstrap(ob)
		d.F1Diff = f1DiffBootstrap(oa, ob)
		d.P = McNemarExact(d.OnlyA, d.OnlyB)
		ps = append(ps, d.P)
		c.Fields = append(c.Fields, d)
	}
	for i, sig := range holm(ps, Alpha) {
		c.Fields[i].Significant = sig
	}
	return c
}

// f1DiffBootstrap returns F1(b) - F1(a) with a 95% percentile interval
// from Bootstrap paired resamples (seed BootstrapSeed).
func f1DiffBootstrap(a, b []Outcome) Metric {
	f1 := func(idx func(int) int, n int) float64 {
		var ca, cb Counts
		for k := range n {
			i := idx(k)
			ca.add(a[i])
			cb.add(b[i])
		}
		return cb.F1() - ca.F1()
	}
	d := f1(func(k int) int { return k }, len(a))
	if math.IsNaN(d) {
		return Metric{}
	}
	rng := rand.New(rand.NewPCG(BootstrapSeed, BootstrapSeed))
	stats := make([]float64, 0, Bootstrap)
	draws := make([]int, len(a))
	for range Bootstrap {
		for k := range draws {
			draws[k] = rng.IntN(len(a))
		}
		if v := f1(func(k int) int { return draws[k] }, len(a)); !math.IsNaN(v) {
			stats = append(stats, v)
		}
	}
	lo, hi := percentiles(stats)
	return Metric{Value: d, Low: lo, High: hi, Defined: true}
}

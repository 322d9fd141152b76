package eval

import "math"

// Counts are one field's outcomes over the labelled messages. A wrong
// value is in FP and in FN (and in Wrong).
type Counts struct {
	N     int `json:"n"` // labelled messages
	TP    int `json:"tp"`
	FP    int `json:"fp"`
	FN    int `json:"fn"`
	TN    int `json:"tn"`
	Wrong int `json:"wrong"`
}

func (c *Counts) add(o Outcome) {
	switch o {
	case Unlabelled:
		return
	case TP:
		c.TP++
	case TN:
		c.TN++
	case FN:
		c.FN++
	case FP:
		c.FP++
	case Wrong:
		c.FP++
		c.FN++
		c.Wrong++
	}
	c.N++
}

// Exact is the number of exact matches: TP + TN.
func (c Counts) Exact() int { return c.TP + c.TN }

// F1 is 2TP / (2TP + FP + FN); NaN when that is 0/0.
func (c Counts) F1() float64 { return ratio(2*c.TP, 2*c.TP+c.FP+c.FN) }

func ratio(a, b int) float64 {
	if b == 0 {
		return math.NaN()
	}
	return float64(a) / float64(b)
}

package pipeline

import "math"

// Price is a model's price in US dollars per million tokens.
type Price struct {
	InputPerMTok       float64
	CachedInputPerMTok float64
	OutputPerMTok      float64
}

// Cost returns the cost in US dollars of a call with the given token
// counts. cached is the part of prompt tokens served from the provider's
// prompt cache, billed at CachedInputPerMTok.
func (p Price) Cost(prompt, cached, completion int) float64 {
	if cached > prompt {
		cached = prompt
	}
	c := float64(prompt-cached)*p.InputPerMTok + float64(cached)*p.CachedInputPerMTok + float64(completion)*p.OutputPerMTok
	return c / 1e6
}

// EstimateTokens is the offline token estimate of a text: one token per
// four bytes, rounded up, the rule of thumb OpenAI documents for English
// ("a token is about 4 characters"). It needs no tokenizer download; it
// over-counts dense JSON slightly, which keeps budget checks conservative.
func EstimateTokens(s string) int { return estimateBytes(len(s)) }

// estimateBytes is EstimateTokens of a text of n bytes.
func estimateBytes(n int) int {
	return int(math.Ceil(float64(n) / 4))
}

// Budget bounds one message run over all its calls. A zero field means no
// limit of that kind.
type Budget struct {
	MaxTokens  int     // prompt plus completion tokens
	MaxCostUSD float64 // US dollars
}

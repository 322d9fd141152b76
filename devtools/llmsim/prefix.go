package llmsim

import (
	"strings"
	"sync"
	"unicode/utf8"
)

// Prompt caching: the openai and llamacpp profiles report, as
// usage.prompt_tokens_details.cached_tokens, the part of a prompt that
// repeats the prefix of a recent prompt to the same model.
//
// A prompt, for this purpose, is the request's text in the order a
// server renders it: the schema (response_format's or the tools'), then
// each message's role and text and tool call arguments. Tokens are the
// simulator's estimate (code points / 4, rounded down for a prefix).
//
//   - openai: "Cache hits require an exact, repeated prefix match and
//     [work] automatically for prompts containing 1024 tokens or more,
//     with cache hits occurring in increments of 128 tokens" (OpenAI's
//     Prompt Caching 201 cookbook): the longest prefix shared with any of
//     the model's recent prompts, 0 under 1,024 tokens, else 1,024 plus
//     whole steps of 128.
//   - llamacpp: the slot's cache holds the previous prompt, and every
//     token of the prefix shared with it is reused (timings.cache_n,
//     tools/server/README.md).

// maxRecentPrompts bounds the prompts remembered per model, and
// maxPromptModels the models.
const (
	maxRecentPrompts = 16
	maxPromptModels  = 64
)

// promptMemory remembers recent prompts per model. Safe for concurrent
// use.
type promptMemory struct {
	mu     sync.Mutex
	models map[string][]string // most recent first
}

// seen returns the longest common prefix, in code points, of prompt with
// the model's remembered prompts (only the most recent when latestOnly),
// then remembers prompt.
func (p *promptMemory) seen(model, prompt string, latestOnly bool) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.models == nil || len(p.models) >= maxPromptModels && p.models[model] == nil {
		p.models = map[string][]string{}
	}
	list := p.models[model]
	best := 0
	for i, old := range list {
		if latestOnly && i > 0 {
			break
		}
		best = max(best, commonPrefixRunes(old, prompt))
	}
	kept := []string{prompt}
	for _, old := range list {
		if old != prompt && len(kept) < maxRecentPrompts {
			kept = append(kept, old)
		}
	}
	p.models[model] = kept
	return best
}

// commonPrefixRunes counts the code points of the longest common prefix
// of a and b.
func commonPrefixRunes(a, b string) int {
	n := min(len(a), len(b))
	i := 0
	for i < n && a[i] == b[i] {
		i++
	}
	// back up to a rune boundary
	for i > 0 && i < len(a) && !utf8.RuneStart(a[i]) {
		i--
	}
	return utf8.RuneCountInString(a[:i])
}

// promptText is req's prompt in a server's order: the schema, then every
// message.
func promptText(req *chatRequest, tg target) string {
	var b strings.Builder
	b.Write(tg.schema)
	b.WriteByte(0)
	for _, m := range req.Messages {
		b.WriteString(m.Role)
		b.WriteByte(0)
		b.WriteString(m.text())
		for _, tc := range m.ToolCalls {
			b.WriteString(string(tc.Function.Arguments))
		}
		b.WriteByte(0)
	}
	return b.String()
}

// cachedTokens returns the cached prompt tokens the profile reports for
// a prompt of promptTok tokens sharing commonRunes code points with a
// recent one.
func cachedTokens(rule string, commonRunes, promptTok int) int {
	c := min(commonRunes/4, promptTok)
	switch rule {
	case "openai":
		if promptTok < 1024 || c < 1024 {
			return 0
		}
		return 1024 + (c-1024)/128*128
	case "prefix":
		return c
	}
	return 0
}

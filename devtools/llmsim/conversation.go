package llmsim

import (
	"errors"
	"regexp"
	"strings"
)

// conversation is what the simulator reads from a request's messages.
type conversation struct {
	// text is the customer message: the <message> block of the extraction
	// turn, or that turn's whole content.
	text string
	// attempt is 1 for the extraction call, plus one per assistant turn.
	attempt int
	// repair reports an assistant turn or a tool result after the first
	// user turn.
	repair bool
	// prev is the last assistant reply: its content, or its first tool
	// call's arguments.
	prev string
	// errs are the "path: message" lines after the last assistant turn.
	errs []errorLine
	// patch reports a repair that asks for a JSON Patch.
	patch bool
	// system is the text of the system (or developer) turns before the
	// first user turn, joined by newlines.
	system string
}

type errorLine struct {
	path    string
	message string
}

var errNoUser = errors.New("messages hold no user message")

// readConversation reads msgs as the product sends them: system, user
// (extraction), and for a repair assistant (previous reply) then user or
// tool (the error list).
func readConversation(msgs []chatMessage) (conversation, error) {
	var c conversation
	first := -1
	for i, m := range msgs {
		if m.Role == "user" {
			first = i
			break
		}
	}
	if first < 0 {
		return c, errNoUser
	}
	var sys []string
	for _, m := range msgs[:first] {
		if m.Role == "system" || m.Role == "developer" {
			sys = append(sys, m.text())
		}
	}
	c.system = strings.Join(sys, "\n")
	end := len(msgs)
	for i := first + 1; i < len(msgs); i++ {
		if msgs[i].Role == "assistant" || msgs[i].Role == "tool" {
			end = i
			break
		}
	}
	for i := end - 1; i >= first; i-- {
		if msgs[i].Role == "user" {
			c.text = messageBlock(msgs[i].text())
			break
		}
	}
	c.repair = end < len(msgs)
	c.attempt = 1
	lastAssistant := -1
	for i := first + 1; i < len(msgs); i++ {
		if msgs[i].Role == "assistant" {
			c.attempt++
			lastAssistant = i
		}
	}
	if !c.repair {
		return c, nil
	}
	if lastAssistant >= 0 {
		a := msgs[lastAssistant]
		c.prev = a.text()
		if len(a.ToolCalls) > 0 {
			c.prev = string(a.ToolCalls[0].Function.Arguments)
		}
	}
	from := max(lastAssistant+1, end)
	var lastAsk string
	seen := map[string]bool{}
	for _, m := range msgs[from:] {
		if m.Role != "user" && m.Role != "tool" {
			continue
		}
		t := m.text()
		lastAsk = t
		for _, e := range errorLines(t) {
			if !seen[e.path] {
				seen[e.path] = true
				c.errs = append(c.errs, e)
			}
		}
	}
	c.patch = strings.Contains(strings.ToLower(lastAsk), "json patch")
	return c, nil
}

// messageBlock returns the text between the lines "<message>" and
// "</message>", or s when it has no such block.
func messageBlock(s string) string {
	open := strings.Index(s, "<message>")
	closeAt := strings.LastIndex(s, "</message>")
	if open < 0 || closeAt < open {
		return s
	}
	inner := s[open+len("<message>") : closeAt]
	inner = strings.TrimPrefix(strings.TrimPrefix(inner, "\r\n"), "\n")
	return strings.TrimSuffix(strings.TrimSuffix(inner, "\n"), "\r")
}

var errorLineRE = regexp.MustCompile(`^\s*(?:[-*]\s+)?(/[^\s:]*)\s*:\s*(.*)$`)

// errorLines reads the "path: message" lines of a repair turn.
func errorLines(s string) []errorLine {
	var out []errorLine
	for _, line := range strings.Split(s, "\n") {
		m := errorLineRE.FindStringSubmatch(strings.TrimRight(line, "\r"))
		if m == nil {
			continue
		}
		out = append(out, errorLine{path: m[1], message: m[2]})
	}
	return out
}

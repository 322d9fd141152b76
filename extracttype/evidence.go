package extracttype

// Evidence locates a grounded value in the message text. Start and End are
// Unicode code-point offsets into the stored text, End exclusive.
//
// The stored value equals the text of its span unless Normalized says
// otherwise: the value matched only on normal forms (case, spacing or
// punctuation inside it differ, "AB12345" for "ab-123 45"). Trimmed says
// the model's value had punctuation or quotes at its ends, which are not
// part of the span and were not stored.
type Evidence struct {
	Path       string `json:"path"`
	Start      int    `json:"start"`
	End        int    `json:"end"`
	Normalized bool   `json:"normalized,omitempty"`
	Trimmed    bool   `json:"trimmed,omitempty"`
}

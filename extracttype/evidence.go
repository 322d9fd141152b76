package extracttype

// Evidence locates a grounded value in the message text. Start and End are
// Unicode code-point offsets into the stored text, End exclusive.
type Evidence struct {
	Path  string `json:"path"`
	Start int    `json:"start"`
	End   int    `json:"end"`
}

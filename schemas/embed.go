// Package schemas holds the versioned JSON Schemas of what the product
// extracts, embedded so every command ships with them.
//
// # Files
//
// Each schema is one file named <id>.v<version>.json (for example
// customer_message.v1.json). A published version is never edited: a change
// is a new file with the next version, so every recorded call can name the
// exact schema it was validated against.
//
// # Dialect and product annotations
//
// Schemas are JSON Schema draft 2020-12 with an "$id", a "title" and these
// annotations, which validators ignore and the product reads:
//
//   - "x-version" (string, root): the schema version recorded with every call.
//   - "x-grounded" (true, on a property): a non-null value must occur in
//     the message text, compared case-insensitively after whitespace is
//     normalised. It catches invented ids.
//   - "x-keywords" (object, on an enum property): maps some enum values to
//     plain lower-case keywords, for heuristic classification (the LLM
//     simulator uses it). Not a model.
//   - "x-intents" (object, on customer_message's flow): maps each flow to
//     the intents it contains.
//
// Strip the x- annotations before sending a schema to a provider whose
// structured-output mode rejects unknown keywords.
package schemas

import "embed"

// FS holds every *.json schema of this folder, at the root of the file
// system (open "customer_message.v1.json").
//
//go:embed *.json
var FS embed.FS

// Package archtest checks the edges between the product's packages, the
// ones DESIGN.md draws, against the real dependency graph of the module as
// `go list -deps -json ./...` reports it. It holds no code: its test reads
// a table of rules, each a set of packages, the dependencies they must not
// have (direct or indirect, tests excluded) and the reason.
//
// A new edge is a new row in that table (rules in deps_test.go). A failing
// rule names the package, the forbidden dependency, the chain of imports
// that brings it in and the rule's reason.
package archtest

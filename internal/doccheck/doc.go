// Package doccheck checks the repository's Markdown documents: every
// relative link names a file of the repository and, with a #fragment, a
// heading of that file. It holds no code: its test does the checking, so
// that a renamed heading or a moved page fails `make test` rather than a
// reader.
package doccheck

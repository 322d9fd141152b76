package doccheck

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"unicode"
)

// link matches an inline Markdown link or image, [text](target), the
// target without spaces and with an optional "title".
var link = regexp.MustCompile(`\]\(([^)\s]+)(?:\s+"[^"]*")?\)`)

// linkTarget matches a link's target with its closing bracket, ](...).
var linkTarget = regexp.MustCompile(`\]\([^)]*\)`)

// TestRelativeLinks: every relative link of a tracked .md file names a
// tracked file or folder, and its #fragment, if any, a heading of the
// Markdown file it names (its anchor as GitHub makes it, see anchors).
func TestRelativeLinks(t *testing.T) {
	root := repoRoot(t)
	files := trackedFiles(t, root)
	tracked := map[string]bool{}
	for _, f := range files {
		tracked[f] = true
		for d := filepath.Dir(f); d != "."; d = filepath.Dir(d) {
			tracked[d] = true
		}
	}
	anchorsOf := map[string]map[string]bool{}
	anchorsFor := func(f string) map[string]bool {
		if a, ok := anchorsOf[f]; ok {
			return a
		}
		b, err := os.ReadFile(filepath.Join(root, f))
		if err != nil {
			t.Fatal(err)
		}
		a := anchors(b)
		anchorsOf[f] = a
		return a
	}
	checked := 0
	for _, f := range files {
		if !strings.HasSuffix(f, ".md") {
			continue
		}
		b, err := os.ReadFile(filepath.Join(root, f))
		if err != nil {
			t.Fatal(err)
		}
		for i, line := range outsideCode(b) {
			for _, m := range link.FindAllStringSubmatch(line, -1) {
				target := m[1]
				if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
					continue
				}
				path, frag, _ := strings.Cut(target, "#")
				dest := f
				if path != "" {
					dest = filepath.Clean(filepath.Join(filepath.Dir(f), path))
					if !tracked[dest] {
						t.Errorf("%s:%d: link %q: %s is not a file of the repository", f, i+1, target, dest)
						continue
					}
				}
				checked++
				if frag == "" || !strings.HasSuffix(dest, ".md") {
					continue
				}
				if !anchorsFor(dest)[frag] {
					t.Errorf("%s:%d: link %q: %s has no heading whose anchor is #%s", f, i+1, target, dest, frag)
				}
			}
		}
	}
	if checked < 50 {
		t.Fatalf("only %d relative links checked: the documents were not read", checked)
	}
}

// anchors returns the anchors GitHub gives the headings of a Markdown
// document: the heading's text lower-cased, with every character but
// letters, digits, spaces, hyphens and underscores dropped, spaces made
// hyphens, and "-1", "-2", ... added to the second and later of the same
// (the rules GitHub documents under "Section links" in "Basic writing
// and formatting syntax"). A link in a heading counts by its text: its
// target is left out first; backticks go with the other punctuation.
func anchors(doc []byte) map[string]bool {
	seen := map[string]int{}
	out := map[string]bool{}
	for _, line := range outsideCode(doc) {
		if !strings.HasPrefix(line, "#") {
			continue
		}
		text := strings.TrimLeft(line, "#")
		if text == "" || text[0] != ' ' {
			continue
		}
		text = strings.TrimSpace(text)
		text = linkTarget.ReplaceAllString(text, "]")
		var b strings.Builder
		for _, r := range strings.ToLower(text) {
			switch {
			case unicode.IsLetter(r), unicode.IsDigit(r), r == '-', r == '_':
				b.WriteRune(r)
			case r == ' ':
				b.WriteByte('-')
			}
		}
		a := b.String()
		if n := seen[a]; n > 0 {
			out[fmt.Sprintf("%s-%d", a, n)] = true
		} else {
			out[a] = true
		}
		seen[a]++
	}
	return out
}

// outsideCode returns doc's lines with those inside fenced code blocks
// blanked (their # lines are not headings, their brackets not links),
// so indexes stay line numbers less one.
func outsideCode(doc []byte) []string {
	var lines []string
	fenced := false
	sc := bufio.NewScanner(bytes.NewReader(doc))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(strings.TrimSpace(line), "```") {
			fenced = !fenced
			lines = append(lines, "")
			continue
		}
		if fenced {
			line = ""
		}
		lines = append(lines, line)
	}
	return lines
}

func repoRoot(t *testing.T) string {
	t.Helper()
	out, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil {
		t.Fatal(err)
	}
	return filepath.Dir(strings.TrimSpace(string(out)))
}

// trackedFiles lists the repository's files, from git when the tree is a
// checkout, else by walking it (an exported tree has no .git).
func trackedFiles(t *testing.T, root string) []string {
	t.Helper()
	if out, err := exec.Command("git", "-C", root, "ls-files").Output(); err == nil && len(out) > 0 {
		return strings.Fields(string(out))
	}
	var files []string
	err := filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		if d.IsDir() && (d.Name() == ".git" || d.Name() == ".run" || d.Name() == "node_modules") {
			return filepath.SkipDir
		}
		if !d.IsDir() {
			files = append(files, rel)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return files
}

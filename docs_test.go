package spillq_test

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// The README is a map into docs/ and the source, so a page moved or a
// heading renamed would leave it pointing nowhere; these tests keep every
// relative link of the Markdown files true, and every Example they name
// running in go test.

var (
	mdLink      = regexp.MustCompile(`\]\(([^)\s]+)\)`)
	inlineCode  = regexp.MustCompile("`[^`]*`")
	exampleName = regexp.MustCompile(`\bExample\w*`)
)

// markdownFiles are the documents a reader follows links through.
func markdownFiles(t *testing.T) []string {
	t.Helper()
	docs, err := filepath.Glob("docs/*.md")
	if err != nil {
		t.Fatal(err)
	}
	files := append([]string{"README.md", "FORMAT.md", "RELIABILITY.md"}, docs...)
	if len(docs) == 0 {
		t.Fatal("no docs/*.md: the README's map points into docs/")
	}
	return files
}

// mdLine is one line of prose (code fences skipped) and where it is.
type mdLine struct {
	file string
	n    int
	text string
}

func proseLines(t *testing.T, file string) []mdLine {
	t.Helper()
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	var lines []mdLine
	fenced := false
	for i, l := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(strings.TrimSpace(l), "```") {
			fenced = !fenced
			continue
		}
		if !fenced {
			lines = append(lines, mdLine{file, i + 1, l})
		}
	}
	return lines
}

// anchors returns the GitHub anchors of a Markdown file's headings: lower
// case, punctuation dropped, spaces to hyphens, a repeat numbered.
func anchors(t *testing.T, file string) map[string]bool {
	t.Helper()
	seen := map[string]int{}
	out := map[string]bool{}
	for _, l := range proseLines(t, file) {
		if !strings.HasPrefix(l.text, "#") {
			continue
		}
		h := strings.TrimSpace(strings.TrimLeft(l.text, "#"))
		var b strings.Builder
		for _, r := range strings.ToLower(h) {
			switch {
			case r == ' ':
				b.WriteRune('-')
			case r == '-' || r == '_' || r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r > 127:
				b.WriteRune(r)
			}
		}
		a := b.String()
		if n := seen[a]; n > 0 {
			seen[a]++
			a = a + "-" + string(rune('0'+n))
		} else {
			seen[a] = 1
		}
		out[a] = true
	}
	return out
}

func TestDocsLinksResolve(t *testing.T) {
	anchorCache := map[string]map[string]bool{}
	links := 0
	for _, file := range markdownFiles(t) {
		for _, l := range proseLines(t, file) {
			text := inlineCode.ReplaceAllStringFunc(l.text, func(c string) string {
				// A code span inside a link's text stays; one holding
				// something that looks like a link is not a link.
				if strings.Contains(c, "](") {
					return ""
				}
				return c
			})
			for _, m := range mdLink.FindAllStringSubmatch(text, -1) {
				target := m[1]
				if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
					continue
				}
				links++
				path, frag, _ := strings.Cut(target, "#")
				resolved := file
				if path != "" {
					resolved = filepath.Join(filepath.Dir(file), path)
					if _, err := os.Stat(resolved); err != nil {
						t.Errorf("%s:%d: link %q: %v", l.file, l.n, target, err)
						continue
					}
				}
				if frag == "" || !strings.HasSuffix(resolved, ".md") {
					continue
				}
				as, ok := anchorCache[resolved]
				if !ok {
					as = anchors(t, resolved)
					anchorCache[resolved] = as
				}
				if !as[frag] {
					t.Errorf("%s:%d: link %q: no heading in %s has anchor #%s", l.file, l.n, target, resolved, frag)
				}
			}
		}
	}
	if links < 20 {
		t.Errorf("found only %d relative links: is the link pattern still right?", links)
	}
}

// TestDocsExamplesRun checks that every Example a document links to by
// name exists in the file linked, and has an Output comment, so go test
// runs it, unless the line says it is only compiled.
func TestDocsExamplesRun(t *testing.T) {
	checked := 0
	for _, file := range markdownFiles(t) {
		for _, l := range proseLines(t, file) {
			for _, m := range regexp.MustCompile(`\[([^\]]*)\]\(([^)\s#]+_test\.go)\)`).FindAllStringSubmatch(l.text, -1) {
				path := filepath.Join(filepath.Dir(file), m[2])
				src, err := os.ReadFile(path)
				if err != nil {
					t.Errorf("%s:%d: %v", l.file, l.n, err)
					continue
				}
				for _, name := range exampleName.FindAllString(m[1], -1) {
					checked++
					body, ok := exampleBody(string(src), name)
					if !ok {
						t.Errorf("%s:%d: %s has no func %s", l.file, l.n, m[2], name)
						continue
					}
					if !strings.Contains(body, "// Output:") && !strings.Contains(body, "// Unordered output:") &&
						!strings.Contains(l.text, "not run") {
						t.Errorf("%s:%d: %s in %s has no Output comment: go test compiles it but does not run it", l.file, l.n, name, m[2])
					}
				}
			}
		}
	}
	if checked == 0 {
		t.Error("no linked Examples found: the README's feature list links each feature to one")
	}
}

// exampleBody returns the source of func name, up to the next top-level
// func.
func exampleBody(src, name string) (string, bool) {
	i := strings.Index(src, "\nfunc "+name+"()")
	if i < 0 {
		return "", false
	}
	rest := src[i+1:]
	if j := strings.Index(rest[1:], "\nfunc "); j >= 0 {
		rest = rest[:j+1]
	}
	return rest, true
}

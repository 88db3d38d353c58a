package docs

import (
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"unicode"
)

// root is the repository's root, from this package's directory.
const root = "../.."

// pages returns the Markdown files whose links are checked, relative to root.
func pages(tb testing.TB) []string {
	tb.Helper()
	out := []string{"README.md", "CONTRIBUTING.md"}
	more, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	if err != nil {
		tb.Fatal(err)
	}
	for _, p := range more {
		rel, err := filepath.Rel(root, p)
		if err != nil {
			tb.Fatal(err)
		}
		out = append(out, rel)
	}
	return out
}

// linkPattern matches an inline link or image, [text](target) or ![alt](target), with
// an optional title after the target.
var linkPattern = regexp.MustCompile(`!?\[[^\]]*\]\(([^)\s]+)(?:\s+"[^"]*")?\)`)

// prose returns the lines of a Markdown file with fenced code blocks and inline code
// spans blanked, so that examples are not taken for links.
func prose(text string) []string {
	var out []string
	fenced := false
	for line := range strings.SplitSeq(text, "\n") {
		if t := strings.TrimSpace(line); strings.HasPrefix(t, "```") || strings.HasPrefix(t, "~~~") {
			fenced = !fenced
			line = ""
		}
		if fenced {
			line = ""
		}
		out = append(out, blankCode(line))
	}
	return out
}

// blankCode replaces each inline code span of line by an empty one.
func blankCode(line string) string {
	var b strings.Builder
	for {
		i := strings.IndexByte(line, '`')
		if i < 0 {
			return b.String() + line
		}
		n := 1
		for i+n < len(line) && line[i+n] == '`' {
			n++
		}
		fence := line[i : i+n]
		j := strings.Index(line[i+n:], fence)
		if j < 0 {
			return b.String() + line
		}
		b.WriteString(line[:i] + "``")
		line = line[i+n+j+n:]
	}
}

// slug is the anchor GitHub gives a heading: lower case, punctuation but hyphens and
// underscores dropped, spaces made hyphens.
func slug(heading string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(heading) {
		switch {
		case r == ' ':
			b.WriteByte('-')
		case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r):
			b.WriteRune(r)
		}
	}
	return b.String()
}

// anchors returns the anchors of a Markdown file's headings, numbered as GitHub numbers
// repeated ones ("usage", "usage-1").
func anchors(text string) map[string]bool {
	out := map[string]bool{}
	seen := map[string]int{}
	fenced := false
	for line := range strings.SplitSeq(text, "\n") {
		t := strings.TrimSpace(line)
		if strings.HasPrefix(t, "```") || strings.HasPrefix(t, "~~~") {
			fenced = !fenced
			continue
		}
		if fenced || !strings.HasPrefix(line, "#") {
			continue
		}
		h := strings.TrimSpace(strings.TrimLeft(line, "#"))
		h = strings.ReplaceAll(h, "`", "")
		s := slug(h)
		if n := seen[s]; n > 0 {
			out[s+"-"+strconv.Itoa(n)] = true
		} else {
			out[s] = true
		}
		seen[s]++
	}
	return out
}

// TestRelativeLinksResolve checks every relative link of the documentation: its file
// or directory exists, and an #anchor into a Markdown file (or the page itself) names
// one of its headings.
func TestRelativeLinksResolve(t *testing.T) {
	for _, page := range pages(t) {
		b, err := os.ReadFile(filepath.Join(root, page))
		if err != nil {
			t.Errorf("%s: %v", page, err)
			continue
		}
		for n, line := range prose(string(b)) {
			for _, m := range linkPattern.FindAllStringSubmatch(line, -1) {
				target := m[1]
				if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
					continue
				}
				path, anchor, _ := strings.Cut(target, "#")
				file := filepath.Join(root, page)
				if path != "" {
					file = filepath.Join(root, filepath.Dir(page), filepath.FromSlash(path))
				}
				if _, err := os.Stat(file); err != nil {
					t.Errorf("%s: link %q (line %d): no such file or directory", page, target, n+1)
					continue
				}
				if anchor == "" || !strings.HasSuffix(file, ".md") {
					continue
				}
				text, err := os.ReadFile(file)
				if err != nil {
					t.Errorf("%s: link %q: %v", page, target, err)
					continue
				}
				if !anchors(string(text))[anchor] {
					t.Errorf("%s: link %q (line %d): no heading with that anchor", page, target, n+1)
				}
			}
		}
	}
}

// TestSlug pins the anchor rule on headings like the documentation's.
func TestSlug(t *testing.T) {
	for heading, want := range map[string]string{
		"Retention and the TTL":                    "retention-and-the-ttl",
		"Documents: to_json(row)":                  "documents-to_jsonrow",
		"Layered versions":                         "layered-versions",
		"A five-minute tour":                       "a-five-minute-tour",
		"Keys and ids":                             "keys-and-ids",
		"Change-driven syncs (watch), in 2 steps!": "change-driven-syncs-watch-in-2-steps",
	} {
		if got := slug(heading); got != want {
			t.Errorf("slug(%q) = %q, want %q", heading, got, want)
		}
	}
}

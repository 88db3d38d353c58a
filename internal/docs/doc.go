// Package docs holds the tests that keep the repository's Markdown documentation
// (README.md, CONTRIBUTING.md, docs/) consistent: every relative link names a file
// that exists and, into a Markdown file, a heading it has.
package docs

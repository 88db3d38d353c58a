package bench

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestFiguresRoundTrip(t *testing.T) {
	path := filepath.Join(t.TempDir(), "figures.jsonl")
	want := []Figure{
		{Benchmark: "BenchmarkAPI", Measurement: "API, cache hit", Figure: "46,211 req/s", Target: "≥ 50%"},
		{Benchmark: "BenchmarkSync", Measurement: "a | b", Figure: "1 s", Missed: true},
	}
	for _, f := range want {
		if err := AppendFigure(path, f); err != nil {
			t.Fatal(err)
		}
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	got, err := ReadFigures(bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("ReadFigures (-want +got):\n%s", diff)
	}
}

func TestRows(t *testing.T) {
	figs := []Figure{
		{Benchmark: "BenchmarkOther", Measurement: "x", Figure: "1"},
		{Benchmark: "BenchmarkAPI", Measurement: "hit", Figure: "1"},
		{Benchmark: "BenchmarkAPI", Measurement: "miss", Figure: "2"},
		{Benchmark: "BenchmarkSync", Measurement: "sync", Figure: "3"},
		{Benchmark: "BenchmarkAPI", Measurement: "hit", Figure: "4"}, // run again
	}
	want := []Figure{
		{Benchmark: "BenchmarkSync", Measurement: "sync", Figure: "3"},
		{Benchmark: "BenchmarkAPI", Measurement: "hit", Figure: "4"},
		{Benchmark: "BenchmarkAPI", Measurement: "miss", Figure: "2"},
		{Benchmark: "BenchmarkOther", Measurement: "x", Figure: "1"},
	}
	if diff := cmp.Diff(want, Rows(figs)); diff != "" {
		t.Errorf("Rows (-want +got):\n%s", diff)
	}
}

func TestTable(t *testing.T) {
	got := Table("a CPU, 2 cores", []Figure{
		{Measurement: "miss", Figure: "73%", Target: "≥ 80%", Missed: true},
		{Measurement: "a | b", Figure: "1 s"},
	})
	want := "Machine: a CPU, 2 cores\n\n" +
		"| measurement | figure | target |\n| --- | --- | --- |\n" +
		"| miss | 73% | ≥ 80%: **missed** |\n" +
		"| a \\| b | 1 s |  |\n"
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("Table (-want +got):\n%s", diff)
	}
}

func TestReplaceTable(t *testing.T) {
	doc := "# T\n\n" + BeginMarker + "\n\nold\n\n" + EndMarker + "\n\nafter\n"
	got, err := ReplaceTable([]byte(doc), "new\n")
	if err != nil {
		t.Fatal(err)
	}
	want := "# T\n\n" + BeginMarker + "\n\nnew\n\n" + EndMarker + "\n\nafter\n"
	if diff := cmp.Diff(want, string(got)); diff != "" {
		t.Errorf("ReplaceTable (-want +got):\n%s", diff)
	}
	if _, err := ReplaceTable([]byte("# T\n"), "new\n"); !errors.Is(err, ErrNoMarkers) {
		t.Errorf("ReplaceTable without markers: err %v, want ErrNoMarkers", err)
	}
}

// TestPerformanceDoc checks that docs/performance.md holds, between its markers,
// exactly what Table prints, so that the next `make bench` output replaces it.
func TestPerformanceDoc(t *testing.T) {
	doc, err := os.ReadFile("../../docs/performance.md")
	if err != nil {
		t.Fatal(err)
	}
	s := string(doc)
	i, j := strings.Index(s, BeginMarker), strings.Index(s, EndMarker)
	if i < 0 || j < i {
		t.Fatalf("docs/performance.md lacks the markers %q and %q", BeginMarker, EndMarker)
	}
	block := strings.TrimPrefix(s[i+len(BeginMarker):j], "\n\n")
	head, table, ok := strings.Cut(block, "\n\n")
	machine, isMachine := strings.CutPrefix(head, "Machine: ")
	if !ok || !isMachine {
		t.Fatalf("the block does not start with a machine line and a blank line:\n%s", block)
	}
	lines := strings.Split(strings.TrimSuffix(table, "\n\n"), "\n")
	if len(lines) < 3 {
		t.Fatalf("the block holds no table:\n%s", block)
	}
	var rows []Figure
	for _, line := range lines[2:] {
		cells := strings.Split(strings.TrimSuffix(strings.TrimPrefix(line, "| "), " |"), " | ")
		if len(cells) != 3 {
			t.Fatalf("not a row of three cells: %q", line)
		}
		target, missed := strings.CutSuffix(cells[2], ": **missed**")
		rows = append(rows, Figure{Measurement: cells[0], Figure: cells[1], Target: target, Missed: missed})
	}
	if diff := cmp.Diff(Table(machine, rows)+"\n", block); diff != "" {
		t.Errorf("docs/performance.md's block is not in Table's format (-want +got):\n%s", diff)
	}
}

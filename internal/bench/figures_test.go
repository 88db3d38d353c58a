package bench

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
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

package bench

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
)

// EnvFigures names the variable holding the file the benchmarks append their figures
// to, one JSON Figure a line; `make bench` sets it and then prints the table. Unset,
// the benchmarks record nothing.
const EnvFigures = "SNAPFLIP_BENCH_FIGURES"

// Figure is one row of the table of figures (docs/performance.md).
type Figure struct {
	// Benchmark is the top-level benchmark that measured it (BenchmarkSync); it
	// places the row in the table.
	Benchmark string `json:"benchmark"`
	// Measurement says what was measured; it names the row, so it does not change
	// from run to run.
	Measurement string `json:"measurement"`
	// Figure is what was measured, with its unit.
	Figure string `json:"figure"`
	// Target is the figure the product aims at, if any.
	Target string `json:"target,omitempty"`
	// Missed says the figure misses its target.
	Missed bool `json:"missed,omitempty"`
}

// benchmarks orders the table's rows: by benchmark in this order (any other after
// them, as recorded), then as each benchmark recorded them.
var benchmarks = []string{
	"BenchmarkSync",
	"BenchmarkAPI",
	"BenchmarkAPIChain",
	"BenchmarkDeltaSync",
	"BenchmarkCommitToVisible",
	"BenchmarkWatchCost",
	"BenchmarkCacheUnderFlips",
	"BenchmarkLogicalCommitToServed",
	"BenchmarkLogicalProbes",
	"BenchmarkLogicalDelete",
	"BenchmarkLogicalPgbench",
	"BenchmarkLogicalWALRetained",
	"BenchmarkDDLToServed",
	"BenchmarkTokenReads",
	"BenchmarkAuth",
	"BenchmarkAwaitWaiters",
	"BenchmarkLargeSync",
	"BenchmarkReplica",
	"BenchmarkFilter",
}

// AppendFigure appends f to the file at path, creating it if need be.
func AppendFigure(path string, f Figure) error {
	var line bytes.Buffer
	enc := json.NewEncoder(&line)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(f); err != nil {
		return err
	}
	file, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		return err
	}
	if _, err := file.Write(line.Bytes()); err != nil {
		file.Close()
		return fmt.Errorf("append figure to %s: %w", path, err)
	}
	return file.Close()
}

// ReadFigures reads the figures AppendFigure wrote.
func ReadFigures(r io.Reader) ([]Figure, error) {
	var figs []Figure
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for n := 1; sc.Scan(); n++ {
		if len(bytes.TrimSpace(sc.Bytes())) == 0 {
			continue
		}
		var f Figure
		if err := json.Unmarshal(sc.Bytes(), &f); err != nil {
			return nil, fmt.Errorf("line %d: %w", n, err)
		}
		figs = append(figs, f)
	}
	return figs, sc.Err()
}

// Rows orders figs as the table lists them. A measurement recorded twice keeps its
// first place and its last figure (a benchmark run again replaces its rows).
func Rows(figs []Figure) []Figure {
	var rows []Figure
	at := map[[2]string]int{}
	for _, f := range figs {
		k := [2]string{f.Benchmark, f.Measurement}
		if i, ok := at[k]; ok {
			rows[i] = f
			continue
		}
		at[k] = len(rows)
		rows = append(rows, f)
	}
	rank := func(f Figure) int {
		if i := slices.Index(benchmarks, f.Benchmark); i >= 0 {
			return i
		}
		return len(benchmarks)
	}
	slices.SortStableFunc(rows, func(a, b Figure) int { return rank(a) - rank(b) })
	return rows
}

// Table renders the block docs/performance.md holds between its markers: the machine
// line, then the table of rows (in Rows' order).
func Table(machine string, rows []Figure) string {
	var s strings.Builder
	fmt.Fprintf(&s, "Machine: %s\n\n", machine)
	s.WriteString("| measurement | figure | target |\n| --- | --- | --- |\n")
	for _, r := range rows {
		target := r.Target
		if r.Missed {
			target += ": **missed**"
		}
		fmt.Fprintf(&s, "| %s | %s | %s |\n", cell(r.Measurement), cell(r.Figure), cell(target))
	}
	return s.String()
}

// cell makes s fit in a table cell.
func cell(s string) string {
	return strings.ReplaceAll(strings.ReplaceAll(s, "|", `\|`), "\n", " ")
}

// The markers around the block Table renders in docs/performance.md.
const (
	BeginMarker = "<!-- figures: make bench prints the block between these markers -->"
	EndMarker   = "<!-- end of figures -->"
)

// ErrNoMarkers is returned by ReplaceTable for a document without both markers.
var ErrNoMarkers = errors.New("no figure markers")

// ReplaceTable returns doc with the text between its markers replaced by block.
func ReplaceTable(doc []byte, block string) ([]byte, error) {
	s := string(doc)
	i := strings.Index(s, BeginMarker)
	j := strings.Index(s, EndMarker)
	if i < 0 || j < i {
		return nil, fmt.Errorf("%w: want %q, then %q", ErrNoMarkers, BeginMarker, EndMarker)
	}
	head := s[:i+len(BeginMarker)]
	return []byte(head + "\n\n" + block + "\n" + s[j:]), nil
}

// Package bench holds snapflip's end-to-end benchmarks (make bench): the syncer against
// a minimal pipelined copy of the same rows, its parts alone, a naive per-row loop,
// the syncer's peak memory, and no-op cycles; a layered version's delta cycle against
// a full copy (BenchmarkDeltaSync); and the metadata API's reads, cached and not, also
// through chains of layers (BenchmarkAPIChain). Each measurement runs the programs as
// their own processes against a Bigtable emulator process started fresh for it.
// Change-driven syncs: commit to served (BenchmarkCommitToVisible), the watch's cost to
// Postgres (BenchmarkWatchCost), cache hits while the pointer flips (BenchmarkCacheUnderFlips).
// Queries by field (BenchmarkFilter): a sync with indexes against one without, cold and
// hot filters against list pages and against Postgres through its own index.
// Each benchmark records its figures, one row each, to the file EnvFigures names, and
// `make bench` ends by printing them (perftable) as docs/performance.md's table.
package bench

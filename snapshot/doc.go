// Package snapshot is snapflip's domain: versions, manifests, the pointer, and the
// protocol that publishes a complete copy of the source under a fresh version and then
// flips one pointer to it, so that readers see all of a sync or none of it.
//
// The package imports nothing else from this repository. It owns the small interfaces
// it needs from storage (implemented by package store, on Bigtable), from the source
// (implemented by package pgsource, on Postgres), and from the layers a version's
// documents are written as and read through (VersionWriter and LayerRuns, implemented
// by package layer); the binaries in cmd/ wire them.
package snapshot

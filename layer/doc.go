// Package layer writes and reads the documents of snapflip's versions: per collection
// a layer (a delta against the parent version's chain, a merged delta, or a base) or a
// full copy, each layer with its fingerprint run, and the reads of a chain's runs that
// tell what a version changed (a delta's changes, Diff, the ids a flip changed).
//
// It imports package snapshot for its vocabulary (Manifest, LayerRef, Document,
// Position, Digest, the source interfaces) and implements the interfaces the protocol
// calls: Writer is a snapshot.VersionWriter, Reader a snapshot.LayerRuns. snapshot never
// imports it; the binaries in internal/cli wire the two.
package layer

// Package resolver is snapflip's read side: it answers reads of a dataset through its
// pointer, from the version the pointer names, with the pointer refreshed on a timer
// and served stale within a bound while storage fails, and documents cached under
// their version, which never changes.
//
// It imports only package snapshot from this repository; package layer supplies the
// layer reads it uses to carry cached documents across a flip (snapshot.LayerRuns).
package resolver

// Package cli holds the logic of snapflip's binaries, as types that tests can start
// in-process: Syncer (cmd/syncer) and MetadataAPI (cmd/metadata-api). Each parses its
// flags, environment and config, wires the adapters to the domain, and runs.
package cli

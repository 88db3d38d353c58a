// Package e2e holds end-to-end tests: the syncer and the metadata API started
// in-process from their command logic, against a real Postgres and the real Bigtable
// client on the Bigtable emulator, run as a process of its own, read over HTTP.
package e2e

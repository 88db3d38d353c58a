// Package pgsource reads snapflip's collections from Postgres: every collection in one
// REPEATABLE READ, READ ONLY transaction, so that a version is one consistent snapshot
// of the source, streamed row by row so that memory does not grow with the tables.
// Documents are made by Postgres itself with to_json(row), so numerics, timestamps,
// arrays, json, jsonb, bytea and NULLs come out exactly as Postgres maps them to JSON
// (to_json and to_jsonb share that mapping; to_json keeps the columns' order and costs
// Postgres about a third less CPU).
//
// A document's id is made from its row's key, one column or several (see ID); a table
// collection may leave its key out, and its primary key (or only unique index over NOT
// NULL columns) is used. Check reports what a sync would find, without reading a row.
//
// Watch and Stream follow the source for changes between syncs. They log nothing:
// what an operator may want to know (a retry, a replication slot created or lost, a
// version compared in full) they report as a typed Event to the Observer in their
// config, which the binary supplies.
package pgsource

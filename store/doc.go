// Package store keeps snapflip's versions in Google Cloud Bigtable: the table and its
// column families, the row-key encoding, batched document writes, manifests, and the
// pointer, every state change made by CheckAndMutateRow so that Bigtable itself checks
// the condition.
//
// Conditional writes need an app profile with single-cluster routing on a replicated
// instance; set Config.AppProfile to one.
package store

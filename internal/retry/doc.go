// Package retry spaces out retries: a capped exponential backoff, with no, full or
// equal jitter, and a wait that ends with its context. Every retry loop in snapflip
// (bulk writes, lease acquires, the change watch's reconnects, its trigger installs,
// the Go client's requests) takes its delays from here, so that a backoff is written
// once. It uses only the standard library, as the client must.
package retry

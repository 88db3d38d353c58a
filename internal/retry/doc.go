// Package retry spaces out retries: a capped exponential backoff, with or without
// full jitter, and a wait that ends with its context. Every retry loop in snapflip
// (bulk writes, lease acquires, the change watch's reconnects, its trigger installs)
// takes its delays from here, so that a backoff is written once.
package retry

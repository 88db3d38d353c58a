// Package client reads a snapflip dataset through the metadata API, for the services
// that serve from it. It uses only the standard library (and this module's own
// internal/retry, which does too).
//
// Every answer comes from exactly one version, which every Document names. Reads through
// the Client follow the pointer: two calls may be answered from two versions if a sync
// published in between. To read several things from one version, take a Snapshot (or
// Pin a version you already know): its Get, BatchGet and List name that version in
// every request. BatchGet and List stay in one version on their own, also when they
// take several requests.
//
//	c, err := client.New("http://metadata-api:8080", client.DefaultConfig())
//	if err != nil {
//		return err
//	}
//	doc, err := c.Get(ctx, "tenants", "acme/eu#1") // ids are escaped for you
//	switch {
//	case errors.Is(err, client.ErrNotFound):
//		// no such tenant in the current version
//	case err != nil:
//		return err
//	}
//	var t Tenant
//	if err := doc.Decode(&t); err != nil {
//		return err
//	}
//
//	snap, err := c.Snapshot(ctx) // pins the current version
//	if err != nil {
//		return err
//	}
//	for doc, err := range snap.List(ctx, "tenant_config", client.ListOptions{PageSize: 500}) {
//		if err != nil {
//			return err // errors.Is(err, client.ErrGone): the version expired; take a new snapshot
//		}
//		_ = doc // every doc.Version == snap.Version()
//	}
//
// Failures are *Error values, which match ErrNotFound (404), ErrGone (410: the version
// asked for does not exist or has expired), ErrBadRequest (400), ErrUnavailable (503,
// or no answer), and for reads with a token ErrNotCovered (412), ErrNotYetCovered (a
// 503) and ErrTokenRejected (a 400) with errors.Is. A 503 (but ErrNotYetCovered) or a
// failed connection is retried with exponential backoff and jitter, no sooner than the
// API's Retry-After, as Config.Retry says; a 4xx never is. Every method takes a
// context, which bounds the whole call, retries included.
//
// Select("a", "b"), passed to Get, BatchGet or List, keeps only those top-level fields
// of each document (the API's ?select=).
//
// A read can be made to see a write to Postgres (once a sync published it): the
// writer takes a token, "x:" || pg_current_xact_id() in its transaction or "s:" ||
// pg_current_snapshot() after its commit (package pgtoken makes both), and a read with
// After(token) is answered only from a version that covers it; the API waits for one
// a few seconds (ErrNotYetCovered past that). SnapshotAfter pins such a version, and
// a Replica's WaitFor waits until it holds one. Every answer names its version's
// snapshot in the Snapshot-Token header: a Client keeps the newest it was answered
// with and sends it with its reads of the current version, so that they never go back
// to an older version, whichever replica of the API answers (unless an operator rolls
// the dataset back: the client follows; or no version covers the kept token within
// the API's wait: the client forgets it and sends the read again without one).
// Config.NoSessionToken turns that off.
//
// With Config.CacheBytes set, Get keeps the documents it read with their ETags and
// revalidates them: a document unchanged since the last read (even across flips) costs
// a 304 without a body.
//
// A Replica holds whole versions of some collections in the process, for reads
// without I/O; NewReplica takes a ReplicaConfig, whose zero fields take their
// defaults and whose Validate names the first field it cannot use. It is made of three parts, each in
// its file: a follower (replica_follow.go) learns of the newest pointer from the flip
// stream, or by polling while the stream is refused, and does nothing else; plan
// (replica_plan.go), a pure function of the version held and that pointer, says per
// collection what to do: learn a version's changes, apply the changes, reload the
// collection whole, or wait; and the replica applies a plan (replica_apply.go):
// it reads the documents, swaps every collection in at once, counts and calls OnFlip.
package client

// Package pgtoken makes the read-your-writes tokens a snapflip metadata API reads, in
// the service that writes to the source database: a read sent with such a token (the
// client's After, or the Snapshot-After header) is answered only from a version that
// holds the write.
//
// FromTx names the writing transaction itself ("x:<xid>"), taken inside it; Now names
// everything committed so far ("s:<snapshot>"), taken after the commit, on any
// connection to the same server. Either is plain text, to hand to whoever will read:
// a response header, a message, a job's arguments.
//
//	tx, err := pool.Begin(ctx)
//	...                                  // the writes
//	tok, err := pgtoken.FromTx(ctx, tx)  // before the commit
//	err = tx.Commit(ctx)                 // tok is valid from here on
//	doc, err := c.Get(ctx, "tenants", id, client.After(tok))
package pgtoken

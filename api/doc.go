// Package api is snapflip's HTTP read surface (chi): every read resolves the dataset's
// pointer through a snapshot resolver, answers from exactly one version, and names it
// in the Snapshot-Version header. Errors are application/problem+json documents.
//
// The package never touches storage: it is given a Reader (implemented by
// resolver.Resolver) and nothing else.
package api

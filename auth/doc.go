// Package auth decides who may read what through the metadata API: it verifies a
// caller's bearer token (a JWT from an issuer the operator names, such as a GKE
// cluster's service-account issuer) into an Identity, and reads the grants of the
// auth file to say, per collection, whether that identity may read it, whether only
// the documents whose field equals one of its claims (a row scope), and whether it may
// call the admin endpoints.
//
// Signatures and the standard claims are checked by github.com/coreos/go-oidc, keys by
// github.com/go-jose/go-jose; this package adds only what they leave to the caller:
// which issuer a token names, a key set read again before it is key_refresh old and
// at most once per interval however many tokens name an unknown key, and a cache of
// verified tokens that forgets a token once its key leaves the set.
package auth

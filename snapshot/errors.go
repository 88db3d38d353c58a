package snapshot

import "errors"

// Sentinel errors. Adapters translate backend errors into these and wrap them with
// context, so callers test with errors.Is.
var (
	// ErrNotFound reports a missing document, manifest, collection or version.
	ErrNotFound = errors.New("not found")
	// ErrGone reports a version that does not exist (any more): never written,
	// expired by the TTL, or not complete.
	ErrGone = errors.New("version gone")
	// ErrCurrentExpired reports that the version the pointer names has outlived its
	// TTL: the syncer has not published or refreshed it in time.
	ErrCurrentExpired = errors.New("the current version has expired")
	// ErrNoVersion reports that the dataset has no published version yet.
	ErrNoVersion = errors.New("no version published yet")
	// ErrConflict reports that a conditional write found state other than expected
	// (a manifest not in the expected state, a pointer that moved since it was read).
	ErrConflict = errors.New("conflict")
	// ErrFenced reports a pointer flip rejected because the stored fence is greater
	// than the caller's fencing token: a newer lease holder exists.
	ErrFenced = errors.New("fenced: a newer fencing token exists")
	// ErrHeld reports that a lease is held by someone else.
	ErrHeld = errors.New("lease held by another holder")
	// ErrLeaseLost reports that a holder lost its lease (renewal failed or its
	// deadline passed).
	ErrLeaseLost = errors.New("lease lost")
	// ErrPinned reports a scheduled flip rejected because the dataset is pinned.
	ErrPinned = errors.New("dataset is pinned")
	// ErrSourceBehind reports a flip rejected because the new version was read from an
	// older source snapshot than the current version.
	ErrSourceBehind = errors.New("source position would go backwards")
	// ErrOutcomeUnknown reports a conditional write (a pointer flip) whose reply was
	// lost and whose effect a re-read could not confirm: it may or may not have
	// applied. Like Iceberg's unknown commit state, the caller must not clean up after
	// it as if it had failed.
	ErrOutcomeUnknown = errors.New("outcome unknown: the write may or may not have applied")
	// ErrUnavailable reports that storage or the source could not be reached in time.
	ErrUnavailable = errors.New("unreachable")
	// ErrInvalid reports bad input: a malformed version, id or configuration.
	ErrInvalid = errors.New("invalid")
	// ErrRefused reports a version that failed a validation gate and was not flipped to.
	ErrRefused = errors.New("refused by a validation gate")
	// ErrTargetRefused reports a rollback or unpin refused for its target: unknown,
	// incomplete, expiring, already current, rolled back from, not pinned.
	ErrTargetRefused = errors.New("refused")
	// ErrRetention reports that storage keeps a version's cells for less time than its
	// TTL needs: a version could be collected while it is served or before it expires.
	ErrRetention = errors.New("storage keeps cells shorter than the TTL needs")
	// ErrSource reports bad source data: a NULL, duplicate or oversized key or document.
	ErrSource = errors.New("bad source data")
	// ErrDeltaInconsistent reports a source row the parent should hold but does not,
	// or a parent run that disagrees with the parent's counts: the delta cannot be
	// trusted, so the publish is redone as bases.
	ErrDeltaInconsistent = errors.New("delta inconsistent with its parent")
	// ErrCannotResume: a base read beside the stream cannot go on from where an
	// earlier read of it stood; it is read again from the start.
	ErrCannotResume = errors.New("the base cannot resume where it stood")
)

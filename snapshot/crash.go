package snapshot

// CrashPoint names a place in the publish and rollback protocols where a test can kill
// the process, to prove that a crash there changes nothing readers can see. The
// syncer sets Publisher.Crash and Admin.Crash from SNAPFLIP_CRASH_AT (test use only).
type CrashPoint string

// The crash points, in protocol order.
const (
	CrashAfterOpen    CrashPoint = "after-open"    // the source snapshot is open; nothing written
	CrashMidWrite     CrashPoint = "mid-write"     // documents are being written
	CrashAfterSeal    CrashPoint = "after-seal"    // the manifest is sealed; the pointer not flipped
	CrashAfterFlip    CrashPoint = "after-flip"    // the pointer flipped; the manifest not yet published
	CrashRollbackFlip CrashPoint = "rollback-flip" // a rollback flipped; bookkeeping not done
)

// crash calls the hook, if any, at a point; rows counts documents written so far.
func crash(hook func(CrashPoint, int64), at CrashPoint, rows int64) {
	if hook != nil {
		hook(at, rows)
	}
}

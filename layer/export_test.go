package layer

// SetKeyedBytes bounds the documents w's keyed reads hold at n bytes, where
// maxKeyedBytes (64 MiB) would need that much data to reach.
func SetKeyedBytes(w *Writer, n int) { w.keyedBytesMax = n }

// SetReplayPage makes a resumed base read back its documents in spans of about n
// ids, for a test's base of a few thousand rows to take several; it returns the
// restore.
func SetReplayPage(n int) (restore func()) {
	was := replayPage
	replayPage = n
	return func() { replayPage = was }
}

package layer

// SetKeyedBytes bounds the documents w's keyed reads hold at n bytes, where
// maxKeyedBytes (64 MiB) would need that much data to reach.
func SetKeyedBytes(w *Writer, n int) { w.keyedBytesMax = n }

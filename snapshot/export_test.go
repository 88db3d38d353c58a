package snapshot

// SetKeyedBytes bounds the documents p's keyed reads hold at n bytes, where
// maxKeyedBytes (64 MiB) would need that much data to reach.
func SetKeyedBytes(p *Publisher, n int) { p.keyedBytesMax = n }

package client

import (
	"container/list"
	"sync"
)

// etagCache keeps the last document read at each URL with its ETag, so that a read of
// the current version can be revalidated with If-None-Match: a 304 costs the server no
// body and the client no decoding. It is bounded by bytes (bodies and keys), least
// recently used first out. Safe for concurrent use.
type etagCache struct {
	mu       sync.Mutex
	maxBytes int64
	bytes    int64
	order    *list.List // of *cacheEntry, most recently used at the front
	byURL    map[string]*list.Element
}

// cacheEntry is one cached document. It is never modified once cached.
type cacheEntry struct {
	url  string
	etag string
	body []byte
}

func (e *cacheEntry) size() int64 { return int64(len(e.url) + len(e.etag) + len(e.body) + 64) }

func newETagCache(maxBytes int64) *etagCache {
	return &etagCache{maxBytes: maxBytes, order: list.New(), byURL: map[string]*list.Element{}}
}

// get returns the entry cached for url, or nil.
func (c *etagCache) get(url string) *cacheEntry {
	c.mu.Lock()
	defer c.mu.Unlock()
	el, ok := c.byURL[url]
	if !ok {
		return nil
	}
	c.order.MoveToFront(el)
	return el.Value.(*cacheEntry)
}

// put caches an entry, replacing the one at its URL, and evicts the least recently
// used entries until the cache is within its bound. An entry larger than the whole
// bound is not cached (and drops what was cached at its URL).
func (c *etagCache) put(e *cacheEntry) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if el, ok := c.byURL[e.url]; ok {
		c.remove(el)
	}
	if e.size() > c.maxBytes {
		return
	}
	c.byURL[e.url] = c.order.PushFront(e)
	c.bytes += e.size()
	for c.bytes > c.maxBytes {
		c.remove(c.order.Back())
	}
}

// drop forgets the entry at url, if any.
func (c *etagCache) drop(url string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if el, ok := c.byURL[url]; ok {
		c.remove(el)
	}
}

func (c *etagCache) remove(el *list.Element) {
	e := c.order.Remove(el).(*cacheEntry)
	delete(c.byURL, e.url)
	c.bytes -= e.size()
}

// len returns how many entries are cached.
func (c *etagCache) len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.order.Len()
}

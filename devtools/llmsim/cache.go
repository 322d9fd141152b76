package llmsim

import (
	"sync"
	"sync/atomic"
)

// clearingCache memoises a function of a string. It holds at most max
// entries: when full it is emptied and fills again, which suits what the
// simulator caches (schemas, their property names, recent message texts):
// few distinct keys, asked about again and again. Safe for concurrent use.
type clearingCache[V any] struct {
	max int64
	m   sync.Map // string -> V
	n   atomic.Int64
}

// get returns the cached value of key, or computes it with f and keeps it.
// An error from f is returned and nothing is kept.
func (c *clearingCache[V]) get(key string, f func(string) (V, error)) (V, error) {
	if v, ok := c.m.Load(key); ok {
		return v.(V), nil
	}
	v, err := f(key)
	if err != nil {
		return v, err
	}
	if c.n.Add(1) > c.max {
		c.m.Clear()
		c.n.Store(0)
	}
	c.m.Store(key, v)
	return v, nil
}

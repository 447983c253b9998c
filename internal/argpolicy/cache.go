package argpolicy

import (
	"maps"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// maxCached bounds the policies Cached keeps: a server has one per tool.
const maxCached = 1024

var (
	cache    sync.Map // fingerprint -> *cached
	nCached  atomic.Int32
	cacheMis atomic.Int64 // compilations, for tests
)

type cached struct {
	exclude []string
	round   map[string]time.Duration
	p       *Policy
	err     error
}

// Cached returns Compile(exclude, round), compiled once per distinct
// policy (up to maxCached of them, then compiled on every call): key
// derivation asks for a tool's policy on every call. It is safe for
// concurrent use; the caller may change exclude and round afterwards.
func Cached(exclude []string, round map[string]time.Duration) (*Policy, error) {
	fp := fingerprint(exclude, round)
	if v, ok := cache.Load(fp); ok {
		if c := v.(*cached); slices.Equal(c.exclude, exclude) && maps.Equal(c.round, round) {
			return c.p, c.err
		}
	}
	cacheMis.Add(1)
	p, err := Compile(exclude, round)
	if nCached.Load() < maxCached {
		c := &cached{exclude: slices.Clone(exclude), round: maps.Clone(round), p: p, err: err}
		if _, loaded := cache.LoadOrStore(fp, c); !loaded {
			nCached.Add(1)
		}
	}
	return p, err
}

// fingerprint hashes a policy (FNV-1a), the round entries in any order.
func fingerprint(exclude []string, round map[string]time.Duration) uint64 {
	const offset, prime = 14695981039346656037, 1099511628211
	str := func(h uint64, s string) uint64 {
		for i := 0; i < len(s); i++ {
			h = (h ^ uint64(s[i])) * prime
		}
		return (h ^ 0xff) * prime // a separator no UTF-8 string holds
	}
	h := uint64(offset)
	for _, e := range exclude {
		h = str(h, e)
	}
	var r uint64
	for k, d := range round {
		r += str(uint64(offset)^uint64(d), k) // order-independent
	}
	return h ^ (r * prime)
}

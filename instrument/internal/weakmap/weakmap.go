// Package weakmap is a concurrent map whose keys are pointers that the map
// does not keep alive: an entry goes away once its key is collected. The
// SDK adapters use it to find the Instrumentation installed on a server
// from the server alone (the HTTP handlers and tool helpers that take a
// server), without keeping every server ever instrumented, as a plain
// global map would: a go-sdk server built per request, or per test, is
// collected with its entry.
package weakmap

import (
	"runtime"
	"sync"
	"weak"
)

// Map maps *K to V. Its zero value is empty and ready to use; it is safe
// for concurrent use. A value must not refer to its key, or the key is
// never collected.
type Map[K, V any] struct {
	m sync.Map // weak.Pointer[K] -> V
}

// Store sets the value of k.
func (m *Map[K, V]) Store(k *K, v V) {
	wp := weak.Make(k)
	if _, loaded := m.m.Swap(wp, v); !loaded {
		runtime.AddCleanup(k, func(wp weak.Pointer[K]) { m.m.Delete(wp) }, wp)
	}
}

// Load returns the value of k, and whether it has one.
func (m *Map[K, V]) Load(k *K) (V, bool) {
	v, ok := m.m.Load(weak.Make(k))
	if !ok {
		var zero V
		return zero, false
	}
	return v.(V), true
}

// Len returns the number of entries.
func (m *Map[K, V]) Len() int {
	n := 0
	m.m.Range(func(any, any) bool { n++; return true })
	return n
}

package weakmap

import (
	"runtime"
	"testing"
	"time"
)

//lint:ignore U1000 the field gives the key a size of its own, so that its collection is observable
type server struct{ name [64]byte }

// TestMap_ForgetsCollectedKeys: an entry goes once its key is collected;
// the entries of live keys stay.
func TestMap_ForgetsCollectedKeys(t *testing.T) {
	var m Map[server, int]
	live := &server{}
	m.Store(live, -1)
	for i := range 100 {
		m.Store(&server{}, i)
	}
	m.Store(live, -2) // a second Store of one key is one entry
	deadline := time.Now().Add(30 * time.Second)
	for m.Len() > 1 && time.Now().Before(deadline) {
		runtime.GC()
		time.Sleep(10 * time.Millisecond)
	}
	if n := m.Len(); n != 1 {
		t.Fatalf("%d entries after the keys were collected, want 1 (the live key's)", n)
	}
	if v, ok := m.Load(live); !ok || v != -2 {
		t.Errorf("Load(live) = %v, %v", v, ok)
	}
	if _, ok := m.Load(&server{}); ok {
		t.Error("Load of a key never stored found a value")
	}
	runtime.KeepAlive(live)
}

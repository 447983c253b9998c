package mcpcall

import (
	"testing"
	"unsafe"
)

// TestOp_FitsItsSizeClass keeps the Op allocated for every request in the
// 768-byte size class: at 776 bytes (its flags scattered among the wider
// fields) it took 896 bytes per request. A field that pushes it over
// should find room elsewhere, or this bound be revisited with a benchmark.
func TestOp_FitsItsSizeClass(t *testing.T) {
	if n := unsafe.Sizeof(Op{}); n > 768 {
		t.Fatalf("Op is %d bytes: more than the 768-byte size class (896 bytes per request)", n)
	}
}

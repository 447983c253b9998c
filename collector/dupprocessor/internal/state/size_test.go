package state

import (
	"testing"
	"unsafe"
)

// The sizes the README's memory figures rest on.
func TestSizes(t *testing.T) {
	if n := unsafe.Sizeof(Member{}); n != 72 {
		t.Errorf("Member is %d bytes, want 72", n)
	}
	if n := unsafe.Sizeof(GroupMeta{}); n != 12 {
		t.Errorf("GroupMeta is %d bytes, want 12", n)
	}
}

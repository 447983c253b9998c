package downstream

import "testing"

// RFC 9562 Appendix A.4: the version-5 UUID of "www.example.com" in the DNS
// namespace.
func TestUUIDV5_RFC9562Vector(t *testing.T) {
	dns := [16]byte{0x6b, 0xa7, 0xb8, 0x10, 0x9d, 0xad, 0x11, 0xd1, 0x80, 0xb4, 0x00, 0xc0, 0x4f, 0xd4, 0x30, 0xc8}
	if got, want := formatUUID(uuidV5(dns, "www.example.com")), "2ed6657d-e927-568b-95e1-2665a8aea6a2"; got != want {
		t.Fatalf("uuidV5 = %s, want %s", got, want)
	}
	// The URL namespace's ID, checked against its well-known form.
	if got := formatUUID(namespaceURL); got != "6ba7b811-9dad-11d1-80b4-00c04fd430c8" {
		t.Fatalf("namespaceURL = %s", got)
	}
}

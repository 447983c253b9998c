package clip_test

import (
	"testing"
	"unicode/utf8"

	"github.com/idemkit-mcp/idemkit/internal/clip"
)

func TestText_NeverSplitsACharacter(t *testing.T) {
	for _, tc := range []struct {
		in   string
		n    int
		want string
	}{
		{"hello", 10, "hello"},
		{"hello", 5, "hello"},
		{"hello", 3, "hel"},
		{"é", 1, ""},                    // 2-byte character
		{"aé", 2, "a"},                  // cut inside é
		{"a😂", 4, "a"},                  // cut inside a 4-byte character
		{"a😂b", 5, "a😂"},                // cut after it
		{"\xff\xfe\xfd", 2, "\xff\xfe"}, // invalid bytes are kept as bytes
		{"a\x80\x80\x80\x80", 3, "a\x80\x80"},
		{"x", 0, ""},
	} {
		got := clip.Text(tc.in, tc.n)
		if got != tc.want {
			t.Errorf("clip.Text(%q, %d) = %q, want %q", tc.in, tc.n, got, tc.want)
		}
		if utf8.ValidString(tc.in) && !utf8.ValidString(got) {
			t.Errorf("clip.Text(%q, %d) = %q split a character", tc.in, tc.n, got)
		}
	}
}

func FuzzText(f *testing.F) {
	f.Add("héllo wörld 😂", 7)
	f.Fuzz(func(t *testing.T, s string, n int) {
		got := clip.Text(s, n)
		if len(got) > max(n, 0) || got != s[:len(got)] {
			t.Fatalf("clip.Text(%q, %d) = %q: not a prefix within n", s, n, got)
		}
		if utf8.ValidString(s) && !utf8.ValidString(got) {
			t.Fatalf("clip.Text(%q, %d) = %q split a character", s, n, got)
		}
		if n >= 0 && len(got) < min(n, len(s))-(utf8.UTFMax-1) {
			t.Fatalf("clip.Text(%q, %d) = %q cut more than one character short", s, n, got)
		}
	})
}

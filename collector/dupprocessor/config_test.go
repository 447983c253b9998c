package dupprocessor

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestToolMatcher(t *testing.T) {
	m := newToolMatcher([]string{"search", "get_*", "list_?ools", `lit\*`})
	for tool, want := range map[string]bool{
		"search": true, "searches": false, "get_weather": true, "get_": true, "forget_x": false,
		"list_tools": true, "list_pools": true, "list_tool": false, "lit*": true, "lit": false, "": false,
	} {
		require.Equal(t, want, m.match(tool), "%q", tool)
	}
	empty := newToolMatcher(nil)
	require.True(t, empty.empty())
}

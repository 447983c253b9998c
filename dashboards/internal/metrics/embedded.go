package metrics

import (
	"sync"

	"github.com/idemkit-mcp/idemkit/dashboards"
)

var (
	loadOnce sync.Once
	loaded   *Registry
	loadErr  error
)

// Load returns the registry embedded in package dashboards (metrics.json).
func Load() (*Registry, error) {
	loadOnce.Do(func() {
		b, err := dashboards.Files.ReadFile(dashboards.Registry)
		if err != nil {
			loadErr = err
			return
		}
		loaded, loadErr = ParseRegistry(b)
	})
	return loaded, loadErr
}

// MustLoad is Load for code that cannot run without the registry.
func MustLoad() *Registry {
	r, err := Load()
	if err != nil {
		panic(err)
	}
	return r
}

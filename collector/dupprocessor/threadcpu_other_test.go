//go:build !linux

package dupprocessor

import "time"

// threadCPU is not available here.
func threadCPU() (time.Duration, bool) { return 0, false }

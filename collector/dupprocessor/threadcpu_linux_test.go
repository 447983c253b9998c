package dupprocessor

import (
	"syscall"
	"time"
)

// rusageThread is RUSAGE_THREAD (Linux): the calling thread's usage.
const rusageThread = 1

// threadCPU returns the CPU time the calling OS thread has used (user and
// system); ok is false where it cannot be read.
func threadCPU() (time.Duration, bool) {
	var ru syscall.Rusage
	if err := syscall.Getrusage(rusageThread, &ru); err != nil {
		return 0, false
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()), true
}

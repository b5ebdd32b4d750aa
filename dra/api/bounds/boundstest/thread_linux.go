package boundstest

import (
	"time"

	"golang.org/x/sys/unix"
)

// threadTime is the CPU time the calling thread has used.
func threadTime() time.Duration {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_THREAD_CPUTIME_ID, &ts); err != nil {
		panic("CLOCK_THREAD_CPUTIME_ID: " + err.Error())
	}
	return time.Duration(ts.Nano())
}

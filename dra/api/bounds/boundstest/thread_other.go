//go:build !linux

package boundstest

import "time"

var epoch = time.Now()

// threadTime is the time since the package was loaded: where a thread's
// CPU time is not at hand, a judgement is measured by the clock.
func threadTime() time.Duration { return time.Since(epoch) }

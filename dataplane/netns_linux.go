package dataplane

import (
	"errors"
	"fmt"
	"runtime"

	"github.com/vishvananda/netns"
)

// inNetns runs fn on a thread in the network namespace at path ("" for the
// caller's own): what resolves by the calling thread's namespace
// (/proc/sys/net, an ethtool ioctl) then sees that namespace.
func inNetns(path string, fn func() error) error {
	if path == "" {
		return fn()
	}
	target, err := netns.GetFromPath(path)
	if err != nil {
		return fmt.Errorf("network namespace %s: %w", path, err)
	}
	defer func() { _ = target.Close() }()
	runtime.LockOSThread()
	orig, err := netns.Get()
	if err != nil {
		runtime.UnlockOSThread()
		return err
	}
	defer func() { _ = orig.Close() }()
	if err := netns.Set(target); err != nil {
		runtime.UnlockOSThread()
		return fmt.Errorf("enter network namespace %s: %w", path, err)
	}
	fnErr := fn()
	if err := netns.Set(orig); err != nil {
		// The thread stays locked and dies with this goroutine: it must
		// not run anything else in the wrong namespace.
		return errors.Join(fnErr, fmt.Errorf("return from network namespace %s: %w", path, err))
	}
	runtime.UnlockOSThread()
	return fnErr
}

//go:build !faultinject

package fault

// Point does nothing in this build.
func Point(string) {}

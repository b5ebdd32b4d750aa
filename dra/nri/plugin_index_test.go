package nri

import "testing"

func TestValidIndex(t *testing.T) {
	for idx, want := range map[string]bool{"10": true, "00": true, "99": true, "": false, "1": false, "100": false, "1a": false, "-1": false, "１０": false} {
		if got := ValidIndex(idx); got != want {
			t.Errorf("ValidIndex(%q) = %v, want %v", idx, got, want)
		}
	}
}

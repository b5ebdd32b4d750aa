package main

import (
	"slices"
	"testing"
)

func TestPlans(t *testing.T) {
	a, b := plans(44, 100), plans(44, 100)
	if !slices.Equal(a, b) {
		t.Fatal("two runs of one seed planned different cycles")
	}
	if slices.Equal(a, plans(45, 100)) {
		t.Error("two seeds planned the same cycles")
	}
	for i, p := range a {
		if p.pullPlug != (i%4 == 2) {
			t.Errorf("cycle %d: pullPlug %v, want it the third of every four", i+1, p.pullPlug)
		}
		if want := map[bool]int{true: 2, false: 3}[i%4 == 1]; p.format != want {
			t.Errorf("cycle %d: checkpoint version %d, want %d (version 2 the second of every four cycles)", i+1, p.format, want)
		}
		if p.after < 300e6 || p.after > 4e9 {
			t.Errorf("cycle %d: the power goes %s after the store opened, want 0.3-4 s", i+1, p.after)
		}
	}
}

func TestGuestUptime(t *testing.T) {
	if got := guestUptime("guest uptime 7.12s, kernel 6.12.95+deb12-amd64, boot 1b2c"); got != 7.12 {
		t.Errorf("guestUptime = %v, want 7.12", got)
	}
	if got := guestUptime(""); got != 0 {
		t.Errorf("guestUptime of nothing = %v, want 0", got)
	}
}

package nldump

import (
	"errors"
	"slices"
	"testing"

	"github.com/vishvananda/netlink"
)

func TestReadAgainWhileInterrupted(t *testing.T) {
	calls := 0
	got, err := Read(func() ([]int, error) {
		calls++
		if calls < 3 {
			return []int{calls}, netlink.ErrDumpInterrupted
		}
		return []int{1, 2, 3}, nil
	})
	if err != nil || !slices.Equal(got, []int{1, 2, 3}) || calls != 3 {
		t.Fatalf("Read = %v, %v after %d reads; want [1 2 3], nil after 3", got, err, calls)
	}
}

func TestReadGivesUp(t *testing.T) {
	calls := 0
	got, err := Read(func() ([]int, error) {
		calls++
		return []int{calls}, netlink.ErrDumpInterrupted
	})
	if !errors.Is(err, netlink.ErrDumpInterrupted) || got != nil || calls != Tries {
		t.Fatalf("Read = %v, %v after %d reads; want nil, an interruption after %d", got, err, calls, Tries)
	}
}

func TestReadOtherErrors(t *testing.T) {
	boom := errors.New("boom")
	calls := 0
	_, err := Read(func() ([]int, error) {
		calls++
		return nil, boom
	})
	if !errors.Is(err, boom) || calls != 1 {
		t.Fatalf("Read = %v after %d reads; want boom after 1", err, calls)
	}
}

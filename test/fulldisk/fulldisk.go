// Package fulldisk makes a claim store's checkpoint and journal writes fail as on a
// full disk (ENOSPC), for tests that fail each write in turn, and fills a tmpfs of
// its own for tests on a disk that is full indeed.
package fulldisk

import (
	"fmt"
	"syscall"

	"github.com/fastpath-dra/fastpath/dra/claims"
)

// Disk counts the writes of the stores it wraps and fails them from the
// FailFrom-th on (0: none fails).
type Disk struct {
	Writes   int
	FailFrom int
}

// Wrap makes s write through d.
func (d *Disk) Wrap(s *claims.Store) {
	write := s.WriteFile
	s.WriteFile = func(path string, data []byte, sync bool) error {
		d.Writes++
		if d.FailFrom > 0 && d.Writes >= d.FailFrom {
			return fmt.Errorf("write %s: %w", path, syscall.ENOSPC)
		}
		return write(path, data, sync)
	}
	appendFile := s.Append
	s.Append = func(path string, data []byte, sync bool, at int64) error {
		d.Writes++
		if d.FailFrom > 0 && d.Writes >= d.FailFrom {
			return fmt.Errorf("write %s: %w", path, syscall.ENOSPC)
		}
		return appendFile(path, data, sync, at)
	}
}

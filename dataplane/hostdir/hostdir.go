package hostdir

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
)

// ErrShared is the error of a directory every user of the node may write
// in by design (sticky and writable by others, as /tmp is): the daemon does
// not take it over, and keeps nothing of its own there.
var ErrShared = errors.New("a directory shared by every user of the node")

// Make makes dir, and any parent missing, with mode perm (less the
// umask), as os.MkdirAll does. A dir that exists and that its group or
// others may write in although perm does not let them is made so that
// they may not (its other bits are kept): a file, link or socket planted
// there by another user would be taken for the daemon's own. A sticky one
// (shared by design, as /tmp is) is refused with ErrShared.
func Make(dir string, perm fs.FileMode) error {
	if err := os.MkdirAll(dir, perm); err != nil {
		return err
	}
	fi, err := os.Stat(dir)
	if err != nil {
		return err
	}
	mode := fi.Mode()
	if !mode.IsDir() {
		return fmt.Errorf("%s is not a directory (mode %s)", dir, mode)
	}
	loose := mode.Perm() & 0o022 &^ perm
	if loose == 0 {
		return nil
	}
	if mode&fs.ModeSticky != 0 {
		return fmt.Errorf("directory %s (mode %s) is %w: name a directory of the daemon's own, which group and others may not write in",
			dir, mode, ErrShared)
	}
	kept := mode & (fs.ModePerm | fs.ModeSetuid | fs.ModeSetgid) &^ loose
	if err := os.Chmod(dir, kept); err != nil {
		return fmt.Errorf("directory %s is writable by group or others (mode %s), and making it %s failed: %w", dir, mode, kept, err)
	}
	return nil
}

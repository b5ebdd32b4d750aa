package vm

import (
	"fmt"
	"io"
	"io/fs"
)

// cpioWriter writes a cpio archive in the "newc" format, the one the kernel
// unpacks as an initramfs.
type cpioWriter struct {
	w   io.Writer
	ino int
	err error
}

// entry adds one file, directory, symlink (data is the target) or device
// node (rdev is major, minor).
func (c *cpioWriter) entry(name string, mode fs.FileMode, data []byte, rdev ...int) {
	if c.err != nil {
		return
	}
	c.ino++
	var kind uint32
	switch {
	case mode.IsDir():
		kind = 0o040000
	case mode&fs.ModeSymlink != 0:
		kind = 0o120000
	case mode&fs.ModeCharDevice != 0:
		kind = 0o020000
	default:
		kind = 0o100000
	}
	major, minor := 0, 0
	if len(rdev) == 2 {
		major, minor = rdev[0], rdev[1]
	}
	nlink := 1
	if mode.IsDir() {
		nlink = 2
	}
	// magic, ino, mode, uid, gid, nlink, mtime, filesize, devmajor,
	// devminor, rdevmajor, rdevminor, namesize, check.
	hdr := fmt.Sprintf("070701%08x%08x%08x%08x%08x%08x%08x%08x%08x%08x%08x%08x%08x",
		c.ino, kind|uint32(mode.Perm()), 0, 0, nlink, 0, len(data), 0, 0, major, minor, len(name)+1, 0)
	c.write([]byte(hdr))
	c.write(append([]byte(name), 0))
	c.pad(len(hdr) + len(name) + 1)
	c.write(data)
	c.pad(len(data))
}

// close writes the trailer.
func (c *cpioWriter) close() error {
	c.entry("TRAILER!!!", 0, nil)
	return c.err
}

func (c *cpioWriter) write(b []byte) {
	if c.err == nil {
		_, c.err = c.w.Write(b)
	}
}

// pad aligns the archive to four bytes after n bytes were written.
func (c *cpioWriter) pad(n int) {
	if r := n % 4; r != 0 {
		c.write(make([]byte, 4-r))
	}
}

package dra

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/fastpath-dra/fastpath/devices/memif"
	"github.com/fastpath-dra/fastpath/dra/api/v1alpha1"
	"github.com/fastpath-dra/fastpath/dra/claims"
	"github.com/fastpath-dra/fastpath/dra/status"
)

// memifProbeTimeout bounds the HELLO an endpoint must answer at Prepare.
const memifProbeTimeout = time.Second

// checkMemif checks a memif device's socket path against the memif
// directory, following symlinks: an endpoint the pod connects to must be
// a socket in it, and the link a vswitch finds a pod's socket by must land
// in it and not exist yet. The endpoint must answer a memif HELLO. It
// records the resolved paths in m and returns why not, or "".
func checkMemif(ctx context.Context, memifDir string, m *claims.Memif) string {
	if memifDir == "" {
		return "this fastpathd has no --memif-dir"
	}
	base, err := filepath.EvalSymlinks(memifDir)
	if err != nil {
		return fmt.Sprintf("--memif-dir: %v", err)
	}
	if m.Role == v1alpha1.MemifRoleSlave {
		real, err := filepath.EvalSymlinks(m.Socket)
		if err != nil {
			return fmt.Sprintf("endpoint socket %s: %v (is the vswitch serving it?)", m.Socket, err)
		}
		if !inside(base, real) {
			return fmt.Sprintf("endpoint socket %s resolves to %s, outside --memif-dir %s", m.Socket, real, memifDir)
		}
		if st, err := os.Stat(real); err != nil || st.Mode()&os.ModeSocket == 0 {
			return fmt.Sprintf("endpoint socket %s is not a socket", m.Socket)
		}
		ctx, cancel := context.WithTimeout(ctx, memifProbeTimeout)
		defer cancel()
		if _, err := memif.Probe(ctx, real); err != nil {
			return fmt.Sprintf("the endpoint does not answer memif HELLO: %v", err)
		}
		m.Socket = real
		return ""
	}
	if m.Socket == "" {
		return ""
	}
	parent, err := filepath.EvalSymlinks(filepath.Dir(m.Socket))
	if err != nil {
		return fmt.Sprintf("endpoint socket %s: %v", m.Socket, err)
	}
	link := filepath.Join(parent, filepath.Base(m.Socket))
	if !inside(base, link) {
		return fmt.Sprintf("endpoint socket %s resolves to %s, outside --memif-dir %s", m.Socket, link, memifDir)
	}
	if _, err := os.Lstat(link); err == nil {
		return fmt.Sprintf("endpoint socket %s already exists: another pod or process serves this endpoint", m.Socket)
	}
	m.Link = link
	return ""
}

func inside(base, path string) bool {
	rel, err := filepath.Rel(base, path)
	return err == nil && rel != "." && rel != ".." && !strings.HasPrefix(rel, "../")
}

// makeMemifDir makes a memif device's directory: mode 0750, owned as
// configured, with a mount point for the endpoint's socket when the pod
// connects to it, or the vswitch's link to the pod's socket when the pod
// serves it. Done again, it finds them in place.
func makeMemifDir(m *claims.Memif) error {
	if err := os.MkdirAll(m.Dir, 0o750); err != nil {
		return err
	}
	if err := os.Chmod(m.Dir, 0o750); err != nil {
		return err
	}
	if err := os.Chown(m.Dir, int(m.UID), int(m.GID)); err != nil {
		return err
	}
	socket := filepath.Join(m.Dir, status.MemifSocketName)
	if m.Role == v1alpha1.MemifRoleSlave {
		return os.WriteFile(socket, nil, 0o600)
	}
	if m.Link == "" {
		return nil
	}
	if target, err := os.Readlink(m.Link); err == nil && target == socket {
		return nil
	}
	return os.Symlink(socket, m.Link)
}

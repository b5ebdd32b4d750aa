package dra

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/fastpath-dra/fastpath/devices"
	"github.com/fastpath-dra/fastpath/devices/memif"
)

// MemifDir is where containers find a memif device's directory:
// <MemifDir>/<request>/memif.sock is the socket, served by the node's
// vswitch (the pod is slave) or created by the pod (the pod is master).
const MemifDir = "/run/fastpath/memif"

const memifSocketName = "memif.sock"

// memifProbeTimeout bounds the HELLO an endpoint must answer at Prepare.
const memifProbeTimeout = time.Second

// memifContainerDir is the directory of a request's memif in containers.
func memifContainerDir(request string) string {
	return filepath.Join(MemifDir, strings.ReplaceAll(request, "/", "_"))
}

// memifContainerSocket is the socket of a request's memif in containers.
func memifContainerSocket(request string) string {
	return filepath.Join(memifContainerDir(request), memifSocketName)
}

// checkMemif checks a memif device's socket path against the memif
// directory, following symlinks: an endpoint the pod connects to must be
// a socket in it, and the link a vswitch finds a pod's socket by must land
// in it and not exist yet. The endpoint must answer a memif HELLO. It
// returns why not, or "".
func checkMemif(ctx context.Context, memifDir string, pd *PreparedDevice) string {
	if memifDir == "" {
		return "this fastpathd has no --memif-dir"
	}
	base, err := filepath.EvalSymlinks(memifDir)
	if err != nil {
		return fmt.Sprintf("--memif-dir: %v", err)
	}
	if pd.MemifRole == devices.MemifRoleSlave {
		real, err := filepath.EvalSymlinks(pd.MemifSocket)
		if err != nil {
			return fmt.Sprintf("endpoint socket %s: %v (is the vswitch serving it?)", pd.MemifSocket, err)
		}
		if !inside(base, real) {
			return fmt.Sprintf("endpoint socket %s resolves to %s, outside --memif-dir %s", pd.MemifSocket, real, memifDir)
		}
		if st, err := os.Stat(real); err != nil || st.Mode()&os.ModeSocket == 0 {
			return fmt.Sprintf("endpoint socket %s is not a socket", pd.MemifSocket)
		}
		ctx, cancel := context.WithTimeout(ctx, memifProbeTimeout)
		defer cancel()
		if _, err := memif.Probe(ctx, real); err != nil {
			return fmt.Sprintf("the endpoint does not answer memif HELLO: %v", err)
		}
		pd.MemifSocket = real
		return ""
	}
	if pd.MemifSocket == "" {
		return ""
	}
	parent, err := filepath.EvalSymlinks(filepath.Dir(pd.MemifSocket))
	if err != nil {
		return fmt.Sprintf("endpoint socket %s: %v", pd.MemifSocket, err)
	}
	link := filepath.Join(parent, filepath.Base(pd.MemifSocket))
	if !inside(base, link) {
		return fmt.Sprintf("endpoint socket %s resolves to %s, outside --memif-dir %s", pd.MemifSocket, link, memifDir)
	}
	if _, err := os.Lstat(link); err == nil {
		return fmt.Sprintf("endpoint socket %s already exists: another pod or process serves this endpoint", pd.MemifSocket)
	}
	pd.MemifLink = link
	return ""
}

func inside(base, path string) bool {
	rel, err := filepath.Rel(base, path)
	return err == nil && rel != "." && rel != ".." && !strings.HasPrefix(rel, "../")
}

// makeMemifDir makes the device's directory: mode 0750, owned as
// configured, with a mount point for the endpoint's socket when the pod
// connects to it, or the vswitch's link to the pod's socket when the pod
// serves it.
func (p PreparedDevice) makeMemifDir() error {
	if err := os.MkdirAll(p.MemifDir, 0o750); err != nil {
		return err
	}
	var uid, gid int64
	if m := p.Config.Memif; m != nil {
		if m.UID != nil {
			uid = *m.UID
		}
		if m.GID != nil {
			gid = *m.GID
		}
	}
	if err := os.Chmod(p.MemifDir, 0o750); err != nil {
		return err
	}
	if err := os.Chown(p.MemifDir, int(uid), int(gid)); err != nil {
		return err
	}
	socket := filepath.Join(p.MemifDir, memifSocketName)
	if p.MemifRole == devices.MemifRoleSlave {
		return os.WriteFile(socket, nil, 0o600)
	}
	if p.MemifLink != "" {
		return os.Symlink(socket, p.MemifLink)
	}
	return nil
}

// memifHostSocket is where the socket the pod uses is on the node.
func (p PreparedDevice) memifHostSocket() string {
	if p.MemifRole == devices.MemifRoleSlave {
		return p.MemifSocket
	}
	return filepath.Join(p.MemifDir, memifSocketName)
}

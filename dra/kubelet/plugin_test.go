package kubelet

import (
	"path/filepath"
	"testing"

	"k8s.io/apimachinery/pkg/types"
)

// TestPluginSocket: the DRA socket carries the pod UID for rolling updates,
// and stays short enough to bind below a deep kubelet root.
func TestPluginSocket(t *testing.T) {
	uid := types.UID("3f0aed38-e122-4666-9d6b-4ab4fb3ce270")
	if got := PluginSocket("/var/lib/kubelet/plugins/fastpath.dev", ""); got != "dra.sock" {
		t.Errorf("without a pod UID: %s", got)
	}
	if got := PluginSocket("/var/lib/kubelet/plugins/fastpath.dev", uid); got != "dra-"+string(uid)+".sock" {
		t.Errorf("on a usual node: %s", got)
	}
	deep := "/var/lib/fastpath-testbed/kubelet/plugins/cni.dra.networking.x-k8s.io"
	got := PluginSocket(deep, uid)
	if len(filepath.Join(deep, got)) > maxSocketPath || got == "dra.sock" {
		t.Errorf("below %s: %s", deep, got)
	}
	if other := PluginSocket(deep, "0b5f7a91-0000-4666-9d6b-4ab4fb3ce270"); other == got {
		t.Errorf("two pods share socket %s", got)
	}
}

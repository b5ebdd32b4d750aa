package dataplane

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// rdmaTree writes a sysfs and /dev of RDMA devices: mlx5_0 (hardware, two
// InfiniBand ports with management datagram devices), rxe0 on eth1,
// siw0 on eth2, and mlx5_9 whose verbs device is missing.
func rdmaTree(t *testing.T, rdmaCM bool) string {
	t.Helper()
	root := t.TempDir()
	write := func(path, value string) {
		t.Helper()
		p := filepath.Join(root, path)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(value+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("sys/class/infiniband/mlx5_0/node_type", "1: CA")
	write("sys/class/infiniband/rxe0/node_type", "1: CA")
	write("sys/class/infiniband/rxe0/parent", "eth1")
	write("sys/class/infiniband/siw0/node_type", "4: RNIC")
	write("sys/class/infiniband/siw0/parent", "eth2")
	write("sys/class/infiniband/mlx5_9/node_type", "1: CA")
	write("sys/class/infiniband_verbs/abi_version", "6")
	write("sys/class/infiniband_verbs/uverbs0/ibdev", "rxe0")
	write("sys/class/infiniband_verbs/uverbs1/ibdev", "mlx5_0")
	write("sys/class/infiniband_verbs/uverbs2/ibdev", "siw0")
	write("sys/class/infiniband_mad/abi_version", "5")
	write("sys/class/infiniband_mad/umad1/ibdev", "mlx5_0")
	write("sys/class/infiniband_mad/umad0/ibdev", "mlx5_0")
	write("sys/class/infiniband_mad/issm0/ibdev", "mlx5_0")
	if rdmaCM {
		write("dev/infiniband/rdma_cm", "")
	}
	return root
}

func TestRDMAFilesDevice(t *testing.T) {
	root := rdmaTree(t, true)
	r := RDMAFiles{SysfsRoot: root, DevRoot: root}
	for name, c := range map[string]struct {
		device  string
		umad    bool
		link    string
		files   []string
		wantErr string
	}{
		"hardware":            {device: "mlx5_0", files: []string{"uverbs1", "rdma_cm"}},
		"hardware with umad":  {device: "mlx5_0", umad: true, files: []string{"uverbs1", "rdma_cm", "umad0", "umad1"}},
		"soft-RoCE":           {device: "rxe0", link: "rxe", files: []string{"uverbs0", "rdma_cm"}},
		"soft-iWARP":          {device: "siw0", link: "siw", files: []string{"uverbs2", "rdma_cm"}},
		"umad on soft-RoCE":   {device: "rxe0", umad: true, wantErr: "has no management datagram device"},
		"no verbs device":     {device: "mlx5_9", wantErr: "ib_uverbs"},
		"no such RDMA device": {device: "mlx5_7", wantErr: "RDMA device mlx5_7"},
	} {
		t.Run(name, func(t *testing.T) {
			got, err := r.Device(c.device, c.umad)
			if c.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), c.wantErr) {
					t.Fatalf("error %v, want one saying %q", err, c.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var files []string
			for _, f := range got.Files {
				if filepath.Dir(f.Path) != "/dev/infiniband" || f.HostPath != filepath.Join(root, f.Path) {
					t.Errorf("file %+v: want /dev/infiniband/... on the node below %s", f, root)
				}
				files = append(files, filepath.Base(f.Path))
			}
			if got.Link != c.link || !slices.Equal(files, c.files) {
				t.Errorf("got link %q, files %v; want %q, %v", got.Link, files, c.link, c.files)
			}
		})
	}
	t.Run("no rdma_cm on the node", func(t *testing.T) {
		root := rdmaTree(t, false)
		got, err := RDMAFiles{SysfsRoot: root, DevRoot: root}.Device("mlx5_0", false)
		if err != nil || len(got.Files) != 1 || filepath.Base(got.Files[0].Path) != "uverbs1" {
			t.Errorf("got %+v, %v; want uverbs1 alone", got, err)
		}
	})
	if p := r.RDMAParent("rxe0"); p != "eth1" {
		t.Errorf("rxe0's parent %q, want eth1", p)
	}
	if p := r.RDMAParent("mlx5_0"); p != "" {
		t.Errorf("mlx5_0's parent %q, want none", p)
	}
}

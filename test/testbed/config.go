package testbed

import (
	"fmt"
	"maps"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
)

// Config says where the bed keeps its state and how it is wired. The zero
// value is completed by Defaults.
type Config struct {
	// Dir holds state, logs, sockets and the kubelet's and containerd's roots.
	// Default /var/lib/fastpath-testbed, or $FASTPATH_TESTBED_DIR.
	Dir string
	// CacheDir holds the builds of test/deps.sh. Default ~/.cache/fastpath,
	// or $FASTPATH_CACHE.
	CacheDir string
	// RepoDir is the fastpath source tree, for building the workload image.
	// Default: found by walking up from the working directory.
	RepoDir string

	// Runtime is the node's container runtime: RuntimeContainerd (the
	// default) or RuntimeCRIO; $FASTPATH_RUNTIME.
	Runtime string
	// KubernetesVersion and ContainerdVersion replace versions.env's, for
	// a bed of another release (make e2e-matrix); test/deps.sh builds them
	// with the same variables. $FASTPATH_K8S_VERSION,
	// $FASTPATH_CONTAINERD_VERSION.
	KubernetesVersion, ContainerdVersion string

	NodeName string // fastpath-node
	// LinkPrefix starts the name of every link the bed creates; cleanup
	// deletes only links with it (and the pod veths on the bed's bridge).
	// Default "fpt".
	LinkPrefix string
	// CgroupName is the kubelet's cgroup root in every hierarchy: the bed's
	// pods live below it, so it finds and removes exactly its containers.
	// Default "fastpath-testbed".
	CgroupName string
	// NodeIP is put on a private veth (no dummy links on every kernel) and is
	// where the kubelet serves.
	NodeIP netip.Addr // 10.213.0.1
	// PodCIDR is the primary pod network, on the bridge <LinkPrefix>br0.
	PodCIDR     netip.Prefix // 10.214.0.0/24
	ServiceCIDR netip.Prefix // 10.215.0.0/24

	// FeatureGates are passed to every Kubernetes component. Unset: the
	// alpha gates of what fastpath can use where a cluster turns them on
	// (DefaultFeatureGates).
	FeatureGates map[string]bool

	// Ports, all on 127.0.0.1 but the kubelet's, which is on NodeIP. They are
	// below the ephemeral range (32768-60999), so no outgoing connection
	// holds one when the bed starts.
	APIServerPort, EtcdPort, SchedulerPort, ControllerManagerPort, KubeletPort, KubeletHealthzPort int
	// RegistryPort serves the bed's images to a CRI-O node.
	RegistryPort int

	// APIQPS is the API request rate kube-scheduler and
	// kube-controller-manager may use (--kube-api-qps; their burst
	// twice it). A pod with a claim costs them three writes more than
	// one without (the claim, the pod's claim status, the allocation),
	// and at their defaults (20 and 50 a second) a burst of such pods
	// waits for their rate limits. Default 200, or
	// $FASTPATH_BED_API_QPS; negative: the components' own defaults.
	APIQPS int
}

// Defaults returns c with every unset field filled in.
func (c Config) Defaults() (Config, error) {
	if c.Dir == "" {
		c.Dir = envOr("FASTPATH_TESTBED_DIR", "/var/lib/fastpath-testbed")
	}
	if c.CacheDir == "" {
		c.CacheDir = os.Getenv("FASTPATH_CACHE")
	}
	if c.CacheDir == "" {
		base := os.Getenv("XDG_CACHE_HOME")
		if base == "" {
			home, err := os.UserHomeDir()
			if err != nil {
				return c, fmt.Errorf("find the cache directory: %w", err)
			}
			base = filepath.Join(home, ".cache")
		}
		c.CacheDir = filepath.Join(base, "fastpath")
	}
	if c.RepoDir == "" {
		dir, err := findRepo()
		if err != nil {
			return c, err
		}
		c.RepoDir = dir
	}
	if c.Runtime == "" {
		c.Runtime = envOr("FASTPATH_RUNTIME", RuntimeContainerd)
	}
	if c.KubernetesVersion == "" {
		c.KubernetesVersion = os.Getenv("FASTPATH_K8S_VERSION")
	}
	if c.ContainerdVersion == "" {
		c.ContainerdVersion = os.Getenv("FASTPATH_CONTAINERD_VERSION")
	}
	if c.Runtime != RuntimeContainerd && c.Runtime != RuntimeCRIO {
		return c, fmt.Errorf("runtime %q (FASTPATH_RUNTIME): the bed runs %s or %s", c.Runtime, RuntimeContainerd, RuntimeCRIO)
	}
	if c.APIQPS == 0 {
		qps, err := strconv.Atoi(envOr("FASTPATH_BED_API_QPS", "200"))
		if err != nil || qps == 0 {
			return c, fmt.Errorf("FASTPATH_BED_API_QPS %q: want a rate a second, or a negative number for the components' defaults", os.Getenv("FASTPATH_BED_API_QPS"))
		}
		c.APIQPS = qps
	}
	if c.NodeName == "" {
		c.NodeName = "fastpath-node"
	}
	if c.LinkPrefix == "" {
		c.LinkPrefix = "fpt"
	}
	if c.CgroupName == "" {
		c.CgroupName = "fastpath-testbed"
	}
	if !c.NodeIP.IsValid() {
		c.NodeIP = netip.MustParseAddr("10.213.0.1")
	}
	if !c.PodCIDR.IsValid() {
		c.PodCIDR = netip.MustParsePrefix("10.214.0.0/24")
	}
	if !c.ServiceCIDR.IsValid() {
		c.ServiceCIDR = netip.MustParsePrefix("10.215.0.0/24")
	}
	if c.FeatureGates == nil {
		v, err := c.Versions()
		if err != nil {
			return c, err
		}
		c.FeatureGates = defaultFeatureGates(v.Kubernetes)
	}
	setDefault(&c.APIServerPort, 26443)
	setDefault(&c.EtcdPort, 22379) // and EtcdPort+1 for peers
	setDefault(&c.SchedulerPort, 26459)
	setDefault(&c.ControllerManagerPort, 26457)
	setDefault(&c.KubeletPort, 26250)
	setDefault(&c.KubeletHealthzPort, 26248)
	setDefault(&c.RegistryPort, 26510)
	return c, nil
}

// The node's container runtimes.
const (
	RuntimeContainerd = "containerd"
	RuntimeCRIO       = "crio"
)

// DefaultFeatureGates are the bed's feature gates beyond its Kubernetes'
// defaults: DRAListTypeAttributes (alpha in 1.37), for fastpathd's
// --numa-node-list. The other DRA features fastpath uses are on by default
// in the bed's Kubernetes.
var DefaultFeatureGates = map[string]bool{"DRAListTypeAttributes": true}

// defaultFeatureGates are DefaultFeatureGates for a bed of Kubernetes
// version: those it knows. A bed of 1.34 needs KubeletCrashLoopBackOffMax
// (alpha there, on by default from 1.35) for the kubelet's short restart
// backoff; DRAListTypeAttributes is 1.36's and later.
func defaultFeatureGates(version string) map[string]bool {
	gates := maps.Clone(DefaultFeatureGates)
	minor := kubeMinor(version)
	if minor < 36 {
		delete(gates, "DRAListTypeAttributes")
	}
	if minor < 35 {
		gates["KubeletCrashLoopBackOffMax"] = true
	}
	return gates
}

// kubeMinor is the minor of a Kubernetes version ("v1.34.4": 34), or 0.
func kubeMinor(version string) int {
	rest, _ := strings.CutPrefix(version, "v1.")
	minor, _, _ := strings.Cut(rest, ".")
	n, _ := strconv.Atoi(minor)
	return n
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

func setDefault(p *int, v int) {
	if *p == 0 {
		*p = v
	}
}

func envOr(key, def string) string {
	if v := os.Getenv(key); v != "" {
		return v
	}
	return def
}

// findRepo walks up from the working directory to the fastpath module root.
func findRepo() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for d := dir; ; d = filepath.Dir(d) {
		if data, err := os.ReadFile(filepath.Join(d, "go.mod")); err == nil && isFastpathModule(data) {
			return d, nil
		}
		if filepath.Dir(d) == d {
			return "", fmt.Errorf("no fastpath source tree above %s: set Config.RepoDir", dir)
		}
	}
}

func isFastpathModule(gomod []byte) bool {
	const want = "module github.com/fastpath-dra/fastpath\n"
	return len(gomod) >= len(want) && string(gomod[:len(want)]) == want
}

// Paths inside Dir. They are short on purpose: unix socket paths are limited
// to 108 bytes.
func (c Config) path(elem ...string) string {
	return filepath.Join(append([]string{c.Dir}, elem...)...)
}

// Kubeconfig is the admin kubeconfig of the bed.
func (c Config) Kubeconfig() string { return c.path("admin.kubeconfig") }

// NRISocket is containerd's NRI socket, where NRI plugins connect. It has
// a directory of its own, which a DaemonSet mounts (as /var/run/nri).
func (c Config) NRISocket() string { return c.path("nri", "nri.sock") }

// NetnsDir is where the runtime mounts pod network namespaces (below its
// state directory, so the bed finds and removes exactly its own).
func (c Config) NetnsDir() string {
	if c.Runtime == RuntimeCRIO {
		return c.path("crio", "ns", "netns")
	}
	return c.path("containerd", "state", "io.containerd.grpc.v1.cri", "netns")
}

// SharedDir is a directory of the bed on a shared mount, as a systemd
// host's / is: a pod mounting a path below it with Bidirectional
// propagation makes mounts the host sees (a bpffs), and with
// HostToContainer it sees the host's later mounts. Tests keep the files
// their daemon pods must see here.
func (c Config) SharedDir() string { return c.path("shared") }

// KubeletDir is the kubelet's root directory.
func (c Config) KubeletDir() string { return c.path("kubelet") }

// PluginDir is the directory the kubelet expects a DRA driver's sockets in.
func (c Config) PluginDir(driver string) string {
	return filepath.Join(c.KubeletDir(), "plugins", driver)
}

// RegistryDir is the kubelet's plugin registration directory.
func (c Config) RegistryDir() string { return filepath.Join(c.KubeletDir(), "plugins_registry") }

// CDIDir is where containerd reads CDI specs: a DRA driver under test
// writes its specs here.
func (c Config) CDIDir() string { return c.path("cdi") }

// LogDir holds one log file per component.
func (c Config) LogDir() string { return c.path("logs") }

// LogFile is the log of one component.
func (c Config) LogFile(component string) string { return filepath.Join(c.LogDir(), component+".log") }

// CNIConfDir is the node's CNI configuration directory (the runtime's).
func (c Config) CNIConfDir() string { return c.path("cni", "net.d") }

// CNIBinDir holds the reference CNI plugins test/deps.sh builds (bridge,
// host-device, macvlan, tuning, host-local, static, loopback).
func (c Config) CNIBinDir() string {
	v, err := c.Versions()
	if err != nil {
		return ""
	}
	return binariesIn(c.CacheDir, v).cni
}

// Versions are the versions of the bed's components.
func (c Config) Versions() (Versions, error) {
	v, err := parseVersions(versionsEnv)
	if err != nil {
		return v, err
	}
	if c.KubernetesVersion != "" {
		v.Kubernetes = c.KubernetesVersion
	}
	if c.ContainerdVersion != "" {
		v.Containerd = c.ContainerdVersion
	}
	return v, nil
}

// Helm is the helm test/deps.sh builds.
func (c Config) Helm() string {
	v, err := c.Versions()
	if err != nil {
		return "helm"
	}
	return filepath.Join(binariesIn(c.CacheDir, v).helm, "helm")
}

// Promtool is the promtool test/deps.sh unpacks (from Debian's
// prometheus package, at the version the apt mirror offered), the newest
// if there are several; "" if there is none.
func (c Config) Promtool() string {
	found, _ := filepath.Glob(filepath.Join(c.CacheDir, "bin", "promtool-*", "usr", "bin", "promtool"))
	if len(found) == 0 {
		return ""
	}
	slices.Sort(found)
	return found[len(found)-1]
}

// Chart is fastpath's Helm chart in the source tree.
func (c Config) Chart() string { return filepath.Join(c.RepoDir, "deploy", "helm", "fastpath") }

// Kubectl is the kubectl built with the bed's Kubernetes.
func (c Config) Kubectl() string {
	v, err := c.Versions()
	if err != nil {
		return "kubectl"
	}
	return filepath.Join(binariesIn(c.CacheDir, v).kubernetes, "kubectl")
}

func (c Config) containerdSocket() string { return c.path("containerd", "containerd.sock") }
func (c Config) crioSocket() string       { return c.path("crio", "crio.sock") }

// runtimeSocket is the CRI socket of the node's runtime.
func (c Config) runtimeSocket() string {
	if c.Runtime == RuntimeCRIO {
		return c.crioSocket()
	}
	return c.containerdSocket()
}
func (c Config) stateFile() string { return c.path("bed.json") }
func (c Config) lockFile() string  { return c.path(".lock") }
func (c Config) nodeLink() string  { return c.LinkPrefix + "node0" }
func (c Config) bridge() string    { return c.LinkPrefix + "br0" }

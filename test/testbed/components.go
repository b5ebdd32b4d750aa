package testbed

import (
	"fmt"
	"path/filepath"
	"strconv"
	"strings"
)

// The configuration files of the node's components. Everything points into
// Dir, so the bed never writes the host's /etc, /var/lib/kubelet or
// /var/lib/containerd.

func containerdConfig(cfg Config, bins binaries) string {
	v, _ := cfg.Versions()
	if strings.HasPrefix(v.Containerd, "v1.") {
		return containerd17Config(cfg, bins)
	}
	// containerd 2.0 takes one CNI binary directory; bin_dirs is 2.1's.
	binDirs := fmt.Sprintf("bin_dirs = [%q]", bins.cni)
	if strings.HasPrefix(v.Containerd, "v2.0.") {
		binDirs = fmt.Sprintf("bin_dir = %q", bins.cni)
	}
	return fmt.Sprintf(`version = 3
root = %[1]q
state = %[2]q

[grpc]
  address = %[3]q
[ttrpc]
  address = %[4]q

[plugins.'io.containerd.internal.v1.opt']
  path = %[5]q

[plugins.'io.containerd.cri.v1.images']
  snapshotter = "overlayfs"
  [plugins.'io.containerd.cri.v1.images'.pinned_images]
    sandbox = %[6]q

[plugins.'io.containerd.cri.v1.runtime']
  # Without CAP_SYS_RESOURCE runc cannot lower oom_score_adj.
  restrict_oom_score_adj = true
  # Pod network namespaces are mounted below the state directory, not in
  # /run/netns, so the bed finds and removes exactly its own.
  netns_mounts_under_state_dir = true
  # DRA drivers under test write their CDI specs here.
  enable_cdi = true
  cdi_spec_dirs = [%[14]q]
  [plugins.'io.containerd.cri.v1.runtime'.containerd]
    default_runtime_name = "runc"
    [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc.options]
        BinaryName = %[7]q
        Root = %[8]q
        SystemdCgroup = false
  [plugins.'io.containerd.cri.v1.runtime'.cni]
    %[15]s
    conf_dir = %[10]q

[plugins.'io.containerd.nri.v1.nri']
  disable = false
  socket_path = %[11]q
  plugin_path = %[12]q
  plugin_config_path = %[13]q
  # Pods may require NRI plugins (required-plugins.noderesource.dev).
  [plugins.'io.containerd.nri.v1.nri'.default_validator]
    enable = true
`,
		cfg.path("containerd", "root"), cfg.path("containerd", "state"),
		cfg.containerdSocket(), cfg.containerdSocket()+".ttrpc",
		cfg.path("containerd", "opt"),
		PauseImage,
		filepath.Join(bins.runc, "runc"), cfg.path("runc"),
		bins.cni, cfg.path("cni", "net.d"),
		cfg.NRISocket(), cfg.path("nri", "plugins"), cfg.path("nri", "conf.d"), cfg.CDIDir(), binDirs)
}

// containerd17Config is containerdConfig in containerd 1.7's format
// (version 2: the CRI plugin one table), for a bed of containerd 1.7. Its
// NRI has no default validator.
func containerd17Config(cfg Config, bins binaries) string {
	return fmt.Sprintf(`version = 2
root = %[1]q
state = %[2]q

[grpc]
  address = %[3]q
[ttrpc]
  address = %[4]q

[plugins."io.containerd.internal.v1.opt"]
  path = %[5]q

[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = %[6]q
  restrict_oom_score_adj = true
  netns_mounts_under_state_dir = true
  enable_cdi = true
  cdi_spec_dirs = [%[14]q]
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        BinaryName = %[7]q
        Root = %[8]q
        SystemdCgroup = false
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = %[9]q
    conf_dir = %[10]q

[plugins."io.containerd.nri.v1.nri"]
  disable = false
  socket_path = %[11]q
  plugin_path = %[12]q
  plugin_config_path = %[13]q
`,
		cfg.path("containerd", "root"), cfg.path("containerd", "state"),
		cfg.containerdSocket(), cfg.containerdSocket()+".ttrpc",
		cfg.path("containerd", "opt"),
		PauseImage,
		filepath.Join(bins.runc, "runc"), cfg.path("runc"),
		bins.cni, cfg.path("cni", "net.d"),
		cfg.NRISocket(), cfg.path("nri", "plugins"), cfg.path("nri", "conf.d"), cfg.CDIDir())
}

// crioConfig is CRI-O's configuration, in every path the bed's own; with
// the same NRI socket, CNI and CDI directories and runc as containerd's.
func crioConfig(cfg Config, bins binaries) string {
	return fmt.Sprintf(`[crio]
root = %[1]q
runroot = %[2]q
storage_driver = "overlay"
log_dir = %[3]q
version_file = %[4]q
version_file_persist = %[5]q
clean_shutdown_file = %[6]q

[crio.api]
listen = %[7]q

[crio.runtime]
default_runtime = "runc"
cgroup_manager = "cgroupfs"
conmon_cgroup = "pod"
namespaces_dir = %[8]q
pinns_path = %[9]q
container_exits_dir = %[10]q
container_attach_socket_dir = %[11]q
cdi_spec_dirs = [%[12]q]
hooks_dir = []
irqbalance_config_file = ""
irqbalance_config_restore_file = ""
log_to_journald = false
# The bed's pods use no host ports, and the node has no iptables.
disable_hostport_mapping = true

[crio.runtime.runtimes.runc]
runtime_path = %[13]q
runtime_root = %[14]q
runtime_type = "oci"
monitor_path = %[15]q
monitor_cgroup = "pod"

[crio.image]
pause_image = %[16]q
pause_command = "/pause"
signature_policy = %[17]q
signature_policy_dir = %[24]q
insecure_registries = ["127.0.0.1:%[18]d"]

[crio.network]
network_dir = %[19]q
plugin_dirs = [%[20]q]

[crio.nri]
enable_nri = true
nri_listen = %[21]q
nri_plugin_dir = %[22]q
nri_plugin_config_dir = %[23]q
`,
		cfg.path("crio", "root"), cfg.path("crio", "run"), cfg.path("crio", "pod-logs"),
		cfg.path("crio", "version"), cfg.path("crio", "version-persist"), cfg.path("crio", "clean.shutdown"),
		cfg.crioSocket(),
		cfg.path("crio", "ns"), filepath.Join(bins.crio, "pinns"),
		cfg.path("crio", "exits"), cfg.path("crio", "attach"), cfg.CDIDir(),
		cfg.crioRunc(), cfg.path("runc"), crioConmon,
		PauseImage, cfg.path("crio", "policy.json"), cfg.RegistryPort,
		cfg.path("cni", "net.d"), bins.cni,
		cfg.NRISocket(), cfg.path("nri", "plugins"), cfg.path("nri", "conf.d"),
		cfg.path("crio", "policies"))
}

// crioConmon is conmon, Debian's package's.
const crioConmon = "/usr/bin/conmon"

// crioRegistries sends CRI-O's pulls of the bed's images to its registry.
func crioRegistries(cfg Config) string {
	return fmt.Sprintf(`unqualified-search-registries = []

[[registry]]
prefix = %q
location = "127.0.0.1:%d"
insecure = true
`, registryDomain, cfg.RegistryPort)
}

// crioPolicy accepts every image: the bed's own, unsigned.
const crioPolicy = `{"default": [{"type": "insecureAcceptAnything"}]}
`

// cniConfig is the primary pod network: a bridge with host-local IPAM.
func cniConfig(cfg Config) string {
	return fmt.Sprintf(`{
  "cniVersion": "1.0.0",
  "name": "fastpath-testbed",
  "plugins": [
    {"type": "bridge", "bridge": %q, "isGateway": true, "ipMasq": false,
     "ipam": {"type": "host-local", "dataDir": %q, "ranges": [[{"subnet": %q}]]}},
    {"type": "loopback"}
  ]
}
`, cfg.bridge(), cfg.path("cni", "ipam"), cfg.PodCIDR.String())
}

func kubeletConfig(cfg Config, p *pki) string {
	return fmt.Sprintf(`apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
address: %[1]s
port: %[2]d
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: %[3]d
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: true}
  x509: {clientCAFile: %[4]q}
authorization: {mode: Webhook}
# This kernel's hosts are cgroup v1 + v2 hybrids; kubelet 1.35 refuses v1
# unless told otherwise.
cgroupDriver: cgroupfs
failCgroupV1: false
cgroupRoot: /%[5]s
failSwapOn: false
containerRuntimeEndpoint: unix://%[6]s
podLogsDir: %[7]q
resolvConf: /etc/resolv.conf
serializeImagePulls: false
imageGCHighThresholdPercent: 100
evictionHard: {memory.available: "100Mi", nodefs.available: "1%%", imagefs.available: "1%%"}
featureGates: {%[8]s}
# A mounted Secret's files follow the Secret at the pod's next sync:
# the webhook's key pair, which the controller makes once its pod runs,
# is served within seconds rather than a minute (the default).
syncFrequency: 10s
# The suite kills fastpathd's container on purpose; a node's restart
# backoff (up to 5 minutes) would keep it waiting.
crashLoopBackOff: {maxContainerRestartPeriod: 2s}
`, cfg.NodeIP, cfg.KubeletPort, cfg.KubeletHealthzPort, p.file("ca.crt"), cfg.CgroupName,
		cfg.runtimeSocket(), cfg.path("pod-logs"), featureGatesYAML(cfg.FeatureGates))
}

func featureGatesYAML(gates map[string]bool) string {
	s := ""
	for _, k := range sortedKeys(gates) {
		if s != "" {
			s += ", "
		}
		s += k + ": " + strconv.FormatBool(gates[k])
	}
	return s
}

// featureGatesFlag renders gates for the control plane's --feature-gates.
func featureGatesFlag(gates map[string]bool) string {
	s := ""
	for _, k := range sortedKeys(gates) {
		if s != "" {
			s += ","
		}
		s += k + "=" + strconv.FormatBool(gates[k])
	}
	return s
}

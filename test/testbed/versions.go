package testbed

import (
	_ "embed"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

//go:embed versions.env
var versionsEnv string

// Versions are the component versions test/deps.sh builds, read from the
// same versions.env file so the two never disagree.
type Versions struct {
	Kubernetes, Etcd, Containerd, Runc, CNIPlugins, Helm string
	// CRIO is the CRI-O version of a CRI-O node.
	CRIO string
}

func parseVersions(text string) (Versions, error) {
	kv := map[string]string{}
	for line := range strings.Lines(text) {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		k, v, ok := strings.Cut(line, "=")
		if !ok {
			return Versions{}, fmt.Errorf("versions.env: malformed line %q", line)
		}
		kv[k] = v
	}
	v := Versions{
		Kubernetes: kv["K8S_VERSION"],
		Etcd:       kv["ETCD_VERSION"],
		Containerd: kv["CONTAINERD_VERSION"],
		Runc:       kv["RUNC_VERSION"],
		CNIPlugins: kv["CNI_PLUGINS_VERSION"],
		Helm:       kv["HELM_VERSION"],
		CRIO:       kv["CRIO_VERSION"],
	}
	for name, val := range map[string]string{"K8S_VERSION": v.Kubernetes, "ETCD_VERSION": v.Etcd,
		"CONTAINERD_VERSION": v.Containerd, "RUNC_VERSION": v.Runc, "CNI_PLUGINS_VERSION": v.CNIPlugins, "HELM_VERSION": v.Helm,
		"CRIO_VERSION": v.CRIO} {
		if val == "" {
			return Versions{}, fmt.Errorf("versions.env: %s is not set", name)
		}
	}
	return v, nil
}

// binaries are the directories test/deps.sh builds into, one per component
// and version under the cache directory.
type binaries struct {
	kubernetes, etcd, containerd, runc, cni, helm string
	// crio holds crio and pinns.
	crio string
}

func binariesIn(cache string, v Versions) binaries {
	dir := func(name, version string) string { return filepath.Join(cache, "bin", name+"-"+version) }
	return binaries{
		kubernetes: dir("kubernetes", v.Kubernetes),
		etcd:       dir("etcd", v.Etcd),
		containerd: dir("containerd", v.Containerd),
		runc:       dir("runc", v.Runc),
		cni:        dir("cni-plugins", v.CNIPlugins),
		helm:       dir("helm", v.Helm),
		crio:       dir("crio", v.CRIO),
	}
}

// BedVersions are the versions of the components a test bed of this
// process's environment runs ($FASTPATH_K8S_VERSION and
// $FASTPATH_CONTAINERD_VERSION over versions.env's).
func BedVersions() (Versions, error) {
	return Config{KubernetesVersion: os.Getenv("FASTPATH_K8S_VERSION"), ContainerdVersion: os.Getenv("FASTPATH_CONTAINERD_VERSION")}.Versions()
}

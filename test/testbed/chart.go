package testbed

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
)

// The release of fastpath's chart on the bed.
const (
	ChartRelease   = "fastpath"
	ChartNamespace = "fastpath-system"
	// DaemonSelector selects the release's fastpathd pods.
	DaemonSelector = "app.kubernetes.io/name=fastpath,app.kubernetes.io/instance=" + ChartRelease
	// FastpathdRepository is the name make image gives the fastpathd image.
	FastpathdRepository = "fastpath.local/fastpathd"
)

// ChartValues fit fastpath's chart to the bed: its kubelet root, NRI
// socket, CDI and network namespace directories, a state and a bpffs
// directory of its own, its node only, the reference CNI plugins it built,
// the image imported (never pulled), and the API server on loopback (the
// bed runs no kube-proxy to reach the kubernetes Service; the pod is in the
// host network namespace). Probes run every second, so a test waits little
// for a daemon to be Ready. Merge more values over these.
func (c Config) ChartValues() map[string]any {
	apiServerEnv := []map[string]any{
		{"name": "KUBERNETES_SERVICE_HOST", "value": "127.0.0.1"},
		{"name": "KUBERNETES_SERVICE_PORT", "value": strconv.Itoa(c.APIServerPort)},
	}
	return map[string]any{
		"image":          map[string]any{"repository": FastpathdRepository, "pullPolicy": "Never"},
		"kubeletRootDir": c.KubeletDir(),
		"nriSocket":      c.NRISocket(),
		"cdiDir":         c.CDIDir(),
		"netnsDir":       c.NetnsDir(),
		"stateDir":       c.path("fastpath"),
		"bpfDir":         filepath.Join(c.SharedDir(), "bpf"),
		"nodeSelector":   map[string]any{"kubernetes.io/hostname": c.NodeName},
		"cni":            map[string]any{"binDirs": []string{c.CNIBinDir()}, "stateDirs": []string{"/var/lib/cni"}},
		"metrics":        map[string]any{"host": "127.0.0.1"},
		"probes": map[string]any{
			"startup":   map[string]any{"periodSeconds": 1, "failureThreshold": 120},
			"readiness": map[string]any{"periodSeconds": 1},
		},
		"extraEnv": apiServerEnv,
		// The controller (with cni.enabled) reaches the API server as the
		// daemon does: from the host network namespace.
		"controller": map[string]any{"hostNetwork": true, "port": ControllerPort, "extraEnv": apiServerEnv},
	}
}

// ControllerPort is where fastpathd controller serves its probes on the
// bed's node.
const ControllerPort = 26179

// Helm runs the bed's helm on the bed's cluster, with its configuration and
// cache in the bed's directory, and returns its combined output.
func (b *Bed) Helm(ctx context.Context, args ...string) ([]byte, error) {
	home := b.cfg.path("helm")
	cmd := exec.CommandContext(ctx, b.cfg.Helm(), append([]string{"--kubeconfig", b.cfg.Kubeconfig()}, args...)...)
	cmd.Env = append(os.Environ(), "HELM_CONFIG_HOME="+filepath.Join(home, "config"),
		"HELM_CACHE_HOME="+filepath.Join(home, "cache"), "HELM_DATA_HOME="+filepath.Join(home, "data"))
	out, err := cmd.CombinedOutput()
	if err != nil {
		return out, fmt.Errorf("helm %s: %w\n%s", strings.Join(args, " "), err, out)
	}
	return out, nil
}

// InstallChart installs or upgrades the release of fastpath's chart with
// the bed's values and then each of values over them, in order. It does not
// wait for the daemon: see WaitDaemon.
func (b *Bed) InstallChart(ctx context.Context, values ...map[string]any) error {
	return b.InstallChartFrom(ctx, b.cfg.Chart(), values...)
}

// InstallChartFrom is InstallChart with the chart in directory chart: an
// earlier release's, which must know every value given.
func (b *Bed) InstallChartFrom(ctx context.Context, chart string, values ...map[string]any) error {
	dir, err := os.MkdirTemp(b.cfg.Dir, "values-")
	if err != nil {
		return err
	}
	defer func() { _ = os.RemoveAll(dir) }()
	args := []string{"upgrade", "--install", ChartRelease, chart, "--namespace", ChartNamespace, "--create-namespace"}
	for i, v := range append([]map[string]any{b.cfg.ChartValues()}, values...) {
		data, err := json.Marshal(v)
		if err != nil {
			return err
		}
		file := filepath.Join(dir, fmt.Sprintf("values-%d.json", i))
		if err := os.WriteFile(file, data, 0o600); err != nil {
			return err
		}
		args = append(args, "--values", file)
	}
	_, err = b.Helm(ctx, args...)
	return err
}

// UninstallChart uninstalls the release, if any, and waits until its pods
// are gone.
func (b *Bed) UninstallChart(ctx context.Context) error {
	if _, err := b.Helm(ctx, "uninstall", ChartRelease, "--namespace", ChartNamespace, "--ignore-not-found", "--wait", "--timeout", "60s"); err != nil {
		return err
	}
	// The release's ReplicaSets (the controller's) and their pods go now,
	// not when the garbage collector gets to them: one left behind (the
	// controller manager's caches slow after an API server restart) would
	// be adopted by the next release's Deployment of the same template,
	// with pods whose tokens name the deleted service account.
	release := metav1.ListOptions{LabelSelector: "app.kubernetes.io/instance=" + ChartRelease}
	if err := b.client.AppsV1().ReplicaSets(ChartNamespace).DeleteCollection(ctx, metav1.DeleteOptions{}, release); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("delete the release's ReplicaSets: %w", err)
	}
	if err := b.client.CoreV1().Pods(ChartNamespace).DeleteCollection(ctx, metav1.DeleteOptions{}, release); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("delete the release's pods: %w", err)
	}
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 60*time.Second, true, func(ctx context.Context) (bool, error) {
		pods, err := b.client.CoreV1().Pods(ChartNamespace).List(ctx, release)
		if err != nil || len(pods.Items) > 0 {
			return false, nil
		}
		sets, err := b.client.AppsV1().ReplicaSets(ChartNamespace).List(ctx, release)
		return err == nil && len(sets.Items) == 0, nil
	})
	if err != nil {
		return fmt.Errorf("the release's pods or ReplicaSets outlived it: %w", err)
	}
	return nil
}

// DaemonPod is the release's fastpathd pod on the bed's node, or nil.
func (b *Bed) DaemonPod(ctx context.Context) (*corev1.Pod, error) {
	pods, err := b.client.CoreV1().Pods(ChartNamespace).List(ctx, metav1.ListOptions{
		LabelSelector: DaemonSelector, FieldSelector: "spec.nodeName=" + b.cfg.NodeName,
	})
	if err != nil {
		return nil, err
	}
	for i := range pods.Items {
		if pods.Items[i].DeletionTimestamp == nil {
			return &pods.Items[i], nil
		}
	}
	return nil, nil
}

// WaitDaemon waits for a Ready fastpathd pod of the release on the bed's
// node other than the pod not (a restarted daemon's new pod), and returns
// it. On timeout the error says why: the pod's status, its events and the
// end of its log.
func (b *Bed) WaitDaemon(ctx context.Context, not types.UID, timeout time.Duration) (*corev1.Pod, error) {
	var last *corev1.Pod
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		p, err := b.DaemonPod(ctx)
		if err != nil || p == nil || p.UID == not {
			return false, nil
		}
		last = p
		return podReady(p)
	})
	if err == nil {
		return last, nil
	}
	if last == nil {
		return nil, fmt.Errorf("no fastpathd pod of release %s/%s on node %s: %w", ChartNamespace, ChartRelease, b.cfg.NodeName, err)
	}
	var log string
	if logs, lerr := b.PodLogs(context.WithoutCancel(ctx), last.Namespace, last.Name); lerr == nil {
		log = "\n--- end of its log ---\n" + tail(logs, 20)
	}
	return last, fmt.Errorf("fastpathd pod %s/%s not Ready: %w (%s)%s", last.Namespace, last.Name, err,
		b.describePod(ctx, last.Namespace, last.Name, last), log)
}

// ImportImage imports an image archive (docker-archive or OCI) into the
// runtime's k8s.io namespace, where the kubelet finds it. Of an image
// index (make image's, of linux/amd64 and linux/arm64), ctr imports the
// index under the image's name and the content of this machine's platform
// only, which is what the kubelet runs.
func (b *Bed) ImportImage(ctx context.Context, archive string) error {
	if b.cfg.Runtime == RuntimeCRIO {
		names, err := addToRegistry(b.cfg.registryDir(), archive)
		if err != nil {
			return fmt.Errorf("import image %s: %w", archive, err)
		}
		return b.pullImages(ctx, names)
	}
	vers, err := b.cfg.Versions()
	if err != nil {
		return err
	}
	ctr := filepath.Join(binariesIn(b.cfg.CacheDir, vers).containerd, "ctr")
	out, err := exec.CommandContext(ctx, ctr, "--address", b.cfg.containerdSocket(), "--namespace", "k8s.io",
		"images", "import", archive).CombinedOutput()
	if err != nil {
		return fmt.Errorf("import image %s: %w: %s", archive, err, out)
	}
	return nil
}

// TagImage gives an image of the runtime's k8s.io namespace another name,
// as a new release of the same image would have.
func (b *Bed) TagImage(ctx context.Context, image, name string) error {
	if b.cfg.Runtime == RuntimeCRIO {
		if err := tagInRegistry(b.cfg.registryDir(), image, name); err != nil {
			return err
		}
		return b.pullImages(ctx, []string{name})
	}
	vers, err := b.cfg.Versions()
	if err != nil {
		return err
	}
	ctr := filepath.Join(binariesIn(b.cfg.CacheDir, vers).containerd, "ctr")
	out, err := exec.CommandContext(ctx, ctr, "--address", b.cfg.containerdSocket(), "--namespace", "k8s.io",
		"images", "tag", "--force", image, name).CombinedOutput()
	if err != nil {
		return fmt.Errorf("tag image %s as %s: %w: %s", image, name, err, out)
	}
	return nil
}

func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

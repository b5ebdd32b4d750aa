//go:build e2e

package e2e

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/fastpath-dra/fastpath/dra/api/v1alpha1"
	"github.com/fastpath-dra/fastpath/dra/claims"
	"github.com/fastpath-dra/fastpath/dra/status"
	"github.com/fastpath-dra/fastpath/test/images"
	"github.com/fastpath-dra/fastpath/test/testbed"
)

var (
	imageOnce sync.Once
	// image is the fastpathd image make image built for this run, imported
	// into the bed's runtime; imageDigest identifies its content.
	image, imageDigest string
	imageErr           error
)

// fastpathdImage builds the fastpathd image once per test run, as
// operators do (make image: make build and the OCI archive), with the
// faultinject build tag (its fault points do nothing unless a test arms
// them), for the bed's platform alone, and imports it into the bed's
// runtime.
func fastpathdImage(t *testing.T) (string, string) {
	t.Helper()
	imageOnce.Do(func() {
		archive := filepath.Join(workDir, "fastpathd-image.tar")
		cmd := exec.Command("make", "--no-print-directory", "image", "IMAGE="+testbed.FastpathdRepository+":e2e", "IMAGE_ARCHIVE="+archive, "GO_TAGS=faultinject", "IMAGE_ARCHES="+runtime.GOARCH)
		cmd.Dir = bed.Config().RepoDir
		if out, err := cmd.CombinedOutput(); err != nil {
			imageErr = fmt.Errorf("make image: %w\n%s", err, out)
			return
		}
		idx, err := images.ReadOCIIndex(archive)
		if err != nil {
			imageErr = err
			return
		}
		image, imageDigest = idx.Manifests[0].Annotations[images.AnnotationImageName], idx.Manifests[0].Digest
		imageErr = bed.ImportImage(context.Background(), archive)
	})
	if imageErr != nil {
		t.Fatal(imageErr)
	}
	return image, imageDigest
}

// daemon is fastpathd running as the DaemonSet pod of the chart's release
// on the bed's node.
type daemon struct {
	name     string // the test's: its logs are kept as fastpathd-<name>.log in the bed's log directory
	stateDir string
	values   map[string]any
	// chart is the chart's directory: "" for this tree's.
	chart   string
	pod     *corev1.Pod
	stopped bool
	// apiRestarts are when the API server was started again (a test's
	// outage): it serves before its authorizer has read the roles, and
	// refuses what the chart's RBAC allows for a few seconds.
	apiRestarts []time.Time
}

// startDaemon installs the chart with the bed's kubelet, NRI, CDI and
// netns paths, metrics on port, a state directory of the test's, and the
// extra fastpathd arguments (as the chart's values where it has them,
// with every other host path they name mounted), and waits until the pod
// is Ready: registered with the kubelet.
func startDaemon(t *testing.T, ctx context.Context, port int, extra ...string) *daemon {
	t.Helper()
	d := newDaemon(t, port, extra...)
	d.start(t, ctx)
	t.Cleanup(func() { d.stop(t) })
	return d
}

// newDaemon is the daemon startDaemon starts, not started yet: a test may
// change its values first.
func newDaemon(t *testing.T, port int, extra ...string) *daemon {
	t.Helper()
	img, digest := fastpathdImage(t)
	repo, tag, _ := strings.Cut(strings.TrimPrefix(img, testbed.FastpathdRepository), ":")
	if repo != "" {
		t.Fatalf("image %s is not of %s", img, testbed.FastpathdRepository)
	}
	d := &daemon{name: "fastpathd-" + strings.ReplaceAll(t.Name(), "/", "_"), stateDir: t.TempDir()}
	values, err := daemonValues(port, d.stateDir, extra)
	if err != nil {
		t.Fatal(err)
	}
	values["image"] = map[string]any{"tag": tag}
	// A new image gives a new pod even when nothing else changed.
	values["podAnnotations"] = map[string]any{"fastpath.dev/image": digest}
	d.values = values
	return d
}

func (d *daemon) start(t *testing.T, ctx context.Context) {
	t.Helper()
	if err := d.install(ctx); err != nil {
		t.Fatal(err)
	}
	d.stopped = false
	d.waitReady(t, ctx, "")
}

// install installs or upgrades the release with the daemon's chart and
// values; it does not wait.
func (d *daemon) install(ctx context.Context) error {
	chart := d.chart
	if chart == "" {
		chart = bed.Config().Chart()
	}
	return bed.InstallChartFrom(ctx, chart, d.values)
}

func (d *daemon) waitReady(t *testing.T, ctx context.Context, not types.UID) {
	t.Helper()
	pod, err := bed.WaitDaemon(ctx, not, 90*time.Second)
	if pod != nil {
		d.pod = pod
	}
	if err != nil {
		t.Fatal(err)
	}
}

// restart deletes the daemon's pod, as a node's operator or an eviction
// would, and waits for the DaemonSet's next one to be Ready with the same
// state.
func (d *daemon) restart(t *testing.T, ctx context.Context) {
	t.Helper()
	d.keepLog(t)
	old := d.pod.UID
	if err := bed.DeletePod(ctx, d.pod.Namespace, d.pod.Name); err != nil {
		t.Fatal(err)
	}
	d.waitReady(t, ctx, old)
}

// stop uninstalls the release, after keeping the pod's log. A daemon that
// was refused an API call fails the test: the chart's RBAC and admission
// policy must allow all it does.
func (d *daemon) stop(t *testing.T) {
	t.Helper()
	if d.stopped {
		return
	}
	d.stopped = true
	log := d.keepLog(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := bed.UninstallChart(ctx); err != nil {
		t.Errorf("uninstall fastpathd: %v", err)
	} else if left := leftState(t, d.stateDir); len(left) > 0 {
		t.Errorf("fastpathd stopped with no claim prepared but left its state on the node: %v", left)
	}
	if refused := d.refusedOutsideRestarts(forbidden(log)); len(refused) > 0 {
		t.Errorf("the API server refused fastpathd %d calls (its RBAC or admission policy lacks something it needs):\n%s",
			len(refused), strings.Join(refused, "\n"))
	}
}

// keepLog appends the current pod's log to the daemon's log file in the
// bed's log directory and returns it.
func (d *daemon) keepLog(t *testing.T) string {
	t.Helper()
	if d.pod == nil {
		return ""
	}
	logs, err := bed.PodLogs(context.Background(), d.pod.Namespace, d.pod.Name)
	if err != nil {
		t.Logf("keep the log of %s: %v", d.pod.Name, err)
		return ""
	}
	f, err := os.OpenFile(d.logFile(), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		t.Logf("keep the log of %s: %v", d.pod.Name, err)
		return logs
	}
	defer f.Close()
	fmt.Fprintf(f, "--- pod %s (%s) ---\n%s", d.pod.Name, d.pod.UID, logs)
	return logs
}

// keptLog keeps the current pod's log and returns the file it is kept in.
func (d *daemon) keptLog(t *testing.T) string {
	t.Helper()
	d.keepLog(t)
	return d.logFile()
}

// logFile is where the daemon's logs are kept.
func (d *daemon) logFile() string { return bed.Config().LogFile(d.name) }

// pid is the process ID of fastpathd in the daemon's current pod.
func (d *daemon) pid(t *testing.T) int {
	t.Helper()
	entries, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		comm, err := os.ReadFile(filepath.Join("/proc", e.Name(), "comm"))
		if err != nil || strings.TrimSpace(string(comm)) != "fastpathd" {
			continue
		}
		cgroups, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cgroup"))
		if err != nil || !bytes.Contains(cgroups, []byte("pod"+string(d.pod.UID))) {
			continue
		}
		// The kubelet's exec probes run fastpathd too, in the same
		// cgroup, as "fastpathd probe ...": they are not the daemon.
		cmdline, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil {
			continue
		}
		if args := strings.Split(string(cmdline), "\x00"); len(args) > 1 && args[1] == "probe" {
			continue
		}
		return pid
	}
	t.Fatalf("no fastpathd process in the cgroup of pod %s (%s)", d.pod.Name, d.pod.UID)
	return 0
}

func (d *daemon) checkpoint() string { return filepath.Join(d.stateDir, "checkpoint.json") }

// daemonValues maps fastpathd arguments to the chart's values: the flags
// the chart has a value for become that value, others go to extraArgs, and
// the host paths they name are mounted at the same path (but those in the
// run's working directory, which is mounted whole). The working directory
// is mounted HostToContainer, not Bidirectional: the chart's own volumes
// below it (state, bpffs) would otherwise show up on the host as mounts.
func daemonValues(port int, stateDir string, args []string) (map[string]any, error) {
	cni := map[string]any{}
	memif := map[string]any{}
	values := map[string]any{
		"stateDir":      stateDir,
		"metrics":       map[string]any{"port": port},
		"logging":       map[string]any{"verbosity": 2},
		"deviceClasses": map[string]any{"create": false},
		"cni":           cni,
		"memif":         memif,
		// Probed each second: a test waits for the pod to be Ready, up to
		// a period of each probe after the daemon is.
		"probes": map[string]any{"startup": map[string]any{"periodSeconds": 1}, "readiness": map[string]any{"periodSeconds": 1}},
	}
	extraArgs := []string{}
	mounts := []map[string]any{{"name": "e2e", "mountPath": workDir, "mountPropagation": "HostToContainer"}}
	volumes := []map[string]any{{"name": "e2e", "hostPath": map[string]any{"path": workDir, "type": "Directory"}}}
	for i := 0; i < len(args); i++ {
		flag := args[i]
		switch flag {
		case "--cni":
			cni["enabled"] = true
			continue
		case "--cni-require-approved":
			cni["requireApproved"] = true
			continue
		case "--cni-shared-device":
			cni["sharedDevice"] = true
			continue
		case "--npwg":
			// On-disk configurations beside the test's state, not in the
			// machine's /etc/cni.
			npwg := sub(values, "npwg")
			npwg["enabled"], npwg["installCRD"], npwg["confDir"] = true, true, stateDir+".npwg-conf"
			npwg["deviceInfoDir"] = stateDir + ".devinfo"
			// The tests' NetworkAttachmentDefinitions name their own
			// links (fp...) and directories, never others of the machine.
			npwg["hostDevices"], npwg["hostPaths"] = []any{"fp*"}, []any{workDir}
			// §3.2.1's example bridge is the network's gateway.
			npwg["hostOptions"] = []any{"bridge.isGateway"}
			continue
		case "--podnetworks":
			pn := sub(values, "podNetworks")
			pn["enabled"], pn["installCRD"] = true, true
			continue
		case "--network-api":
			// The socket beside the test's state; _fallback from the
			// bed's CNI configuration directory.
			api := sub(values, "networkAPI")
			api["enabled"], api["socketDir"], api["cniConfDir"] = true, stateDir+".netapi", bed.Config().CNIConfDir()
			continue
		case "--npwg-ipamclaims":
			claims := sub(sub(values, "npwg"), "ipamClaims")
			claims["enabled"], claims["installCRD"] = true, true
			continue
		case "--numa-node-list":
			values["numaNodeList"] = true
			continue
		case "--attach-overlap=false":
			values["attachOverlap"] = false
			continue
		}
		if i+1 == len(args) {
			return nil, fmt.Errorf("fastpathd argument %s has no value", flag)
		}
		i++
		v := args[i]
		switch flag {
		case "--bpf-dir":
			values["bpfDir"] = v
		case "--filter":
			values["filter"] = v
		case "--binding-conditions":
			sub(values, "bindingConditions")["selector"] = v
		case "--binding-timeout":
			sub(values, "bindingConditions")["timeout"] = v
		case "--interface-sysctls":
			values["interfaceSysctls"] = strings.Split(v, ",")
		case "--share":
			share(values)["filter"] = v
		case "--resource-name":
			name, filter, _ := strings.Cut(v, "=")
			names, _ := values["resourceNames"].([]any)
			values["resourceNames"] = append(names, map[string]any{"name": name, "filter": filter})
		case "--share-interfaces":
			n, err := strconv.Atoi(v)
			if err != nil {
				return nil, fmt.Errorf("--share-interfaces %q: %w", v, err)
			}
			share(values)["interfaces"] = n
		case "--share-bandwidth-mbps":
			n, err := strconv.Atoi(v)
			if err != nil {
				return nil, fmt.Errorf("--share-bandwidth-mbps %q: %w", v, err)
			}
			share(values)["bandwidthMbps"] = n
		case "--ip-pools":
			// The chart takes the pools as a value: the file's.
			data, err := os.ReadFile(v)
			if err != nil {
				return nil, err
			}
			cfg, errs := v1alpha1.DecodeIPPoolConfig(data, field.NewPath(v))
			if len(errs) > 0 {
				return nil, errs.ToAggregate()
			}
			var pools []any
			for _, p := range cfg.Pools {
				m := map[string]any{}
				raw, _ := json.Marshal(p)
				_ = json.Unmarshal(raw, &m)
				pools = append(pools, m)
			}
			values["ipPools"] = pools
		case "--npwg-ipamclaim-check-interval":
			sub(sub(values, "npwg"), "ipamClaims")["checkInterval"] = v
		case "--podnetwork-params-recheck":
			sub(values, "podNetworks")["paramsRecheck"] = v
		case "--memif-dir":
			memif["dir"] = v
		case "--cni-plugin-dir":
			// The chart puts it in the kubelet's plugin directory, as the bed does.
			if v != bed.PluginDir(cniDriver) {
				return nil, fmt.Errorf("--cni-plugin-dir %s: the chart puts it at %s", v, bed.PluginDir(cniDriver))
			}
		case "--cni-bin-dir":
			cni["binDirs"] = strings.Split(v, ",")
		case "--cni-plugins":
			cni["plugins"] = strings.Split(v, ",")
		case "--cni-interface":
			cni["interface"] = v
		case "--cni-check-interval":
			cni["checkInterval"] = v
		case "--cni-config-namespace":
			cni["configNamespace"] = v
		case "--cni-devices":
			n, err := strconv.Atoi(v)
			if err != nil {
				return nil, fmt.Errorf("--cni-devices %q: %w", v, err)
			}
			cni["devices"] = n
		case "--cni-max-plugins":
			n, err := strconv.Atoi(v)
			if err != nil {
				return nil, fmt.Errorf("--cni-max-plugins %q: %w", v, err)
			}
			cni["maxPlugins"] = n
		default:
			extraArgs = append(extraArgs, flag+"="+v)
			if filepath.IsAbs(v) && !strings.HasPrefix(v, workDir+"/") {
				name := fmt.Sprintf("e2e-%d", len(volumes))
				mounts = append(mounts, map[string]any{"name": name, "mountPath": v})
				volumes = append(volumes, map[string]any{"name": name, "hostPath": map[string]any{"path": v, "type": "Directory"}})
			}
		}
	}
	values["extraArgs"] = extraArgs
	values["extraVolumes"] = volumes
	values["extraVolumeMounts"] = mounts
	return values, nil
}

// share is the chart's share value in values.
func share(values map[string]any) map[string]any { return sub(values, "share") }

// sub is the map values[key], made if missing.
func sub(values map[string]any, key string) map[string]any {
	if s, ok := values[key].(map[string]any); ok {
		return s
	}
	s := map[string]any{}
	values[key] = s
	return s
}

// refusedOutsideRestarts is refused, log lines of the daemon, but for those
// logged in the 30 s after one of the API server's restarts (by their
// klog header's time of day, this day).
func (d *daemon) refusedOutsideRestarts(refused []string) []string {
	return slices.DeleteFunc(refused, func(l string) bool {
		fields := strings.Fields(l)
		if len(fields) < 2 || len(fields[0]) != 5 {
			return false
		}
		at, err := time.ParseInLocation("15:04:05.000000", fields[1], time.Local)
		if err != nil {
			return false
		}
		for _, r := range d.apiRestarts {
			day := time.Date(r.Year(), r.Month(), r.Day(), at.Hour(), at.Minute(), at.Second(), at.Nanosecond(), time.Local)
			if !day.Before(r) && day.Before(r.Add(30*time.Second)) {
				return true
			}
		}
		return false
	})
}

// forbidden lists the log lines that report a refused API call.
func forbidden(log string) []string {
	var out []string
	sc := bufio.NewScanner(strings.NewReader(log))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		if l := sc.Text(); strings.Contains(l, "forbidden") || strings.Contains(l, "denied request") {
			out = append(out, l)
		}
	}
	return out
}

// leftState is what a daemon that has stopped left in its state directory
// although no claim is prepared: nothing, unless its checkpoint holds
// claims.
func leftState(t *testing.T, dir string) []string {
	t.Helper()
	if cls, _, err := claims.Read(filepath.Join(dir, "checkpoint.json")); err != nil || len(cls) > 0 {
		return nil // claims prepared (or a checkpoint the test cannot read): kept
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil
	}
	var left []string
	for _, e := range entries {
		left = append(left, e.Name())
	}
	return left
}

// waitFeaturesOff waits until the node's condition FastpathFeaturesOff has
// status want and its message says each of says, and returns it.
func waitFeaturesOff(t *testing.T, ctx context.Context, want corev1.ConditionStatus, says ...string) corev1.NodeCondition {
	t.Helper()
	var got corev1.NodeCondition
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		n, err := bed.Client().CoreV1().Nodes().Get(ctx, bed.NodeName(), metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		for _, c := range n.Status.Conditions {
			if c.Type == status.FeaturesOffCondition {
				got = c
			}
		}
		if got.Status != want {
			return false, nil
		}
		for _, s := range says {
			if !strings.Contains(got.Message, s) {
				return false, nil
			}
		}
		return true, nil
	})
	if err != nil {
		t.Fatalf("the node's condition %s is %+v, want status %s saying %q", status.FeaturesOffCondition, got, want, says)
	}
	t.Logf("the node's condition %s=%s (%s): %s", got.Type, got.Status, got.Reason, got.Message)
	return got
}

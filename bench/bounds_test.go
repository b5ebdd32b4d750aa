package bench

import (
	"context"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/go-logr/logr"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"

	"github.com/fastpath-dra/fastpath/devices"
	"github.com/fastpath-dra/fastpath/dra"
	"github.com/fastpath-dra/fastpath/dra/api/bounds"
	"github.com/fastpath-dra/fastpath/dra/claims"
	"github.com/fastpath-dra/fastpath/dra/cnidriver"
	"github.com/fastpath-dra/fastpath/dra/cnipolicy"
	"github.com/fastpath-dra/fastpath/dra/dratest"
	"github.com/fastpath-dra/fastpath/dra/nri"
	"github.com/fastpath-dra/fastpath/test/sysfsfixture"
)

// refuseText is the most a refusal may say.
const refuseText = 64 << 10

// fill is doc (an object ending in "}") with members made by member added
// before its end while it stays within most bytes; how many were added.
func fill(doc string, most int, member func(i int) string) (string, int) {
	var b strings.Builder
	b.WriteString(doc[:len(doc)-1])
	n := 0
	for {
		m := member(n)
		if b.Len()+len(m)+2 > most {
			break
		}
		b.WriteString(m)
		n++
	}
	b.WriteString("}")
	return b.String(), n
}

// unknownFields is an InterfaceConfig of at most most bytes whose every
// section holds unknown fields, as many as fit: each a problem.
func unknownFields(most int) string {
	sections := []string{"interface", "vf", "xdp", "memif", "macvlan", "ipvlan", "vlan", "ipam", "rdma"}
	head := `{"apiVersion": "fastpath.dev/v1alpha1", "kind": "InterfaceConfig"`
	per := (most - len(head) - 2) / len(sections)
	var parts []string
	for _, s := range sections {
		obj, _ := fill(`{}`, per-len(s)-6, func(i int) string {
			sep := ","
			if i == 0 {
				sep = ""
			}
			return fmt.Sprintf(`%s"k%d":0`, sep, i)
		})
		parts = append(parts, fmt.Sprintf(`"%s": %s`, s, obj))
	}
	return head + ", " + strings.Join(parts, ", ") + "}"
}

// hostPaths is CNI parameters of at most most bytes whose plugin's config
// holds lists of host paths, as many as fit: each a problem.
func hostPaths(most int) string {
	head := `{"apiVersion": "cni.networking.x-k8s.io/v1alpha1", "kind": "CNI", "ifName": "net1", "plugins": [{"type": "macvlan", ` +
		`"arguments": [{"fieldPath": "master", "attributeRef": "name"}], "config": {}}]}`
	list := func(n int) string { return "[" + strings.TrimSuffix(strings.Repeat(`"/a",`, n), ",") + "]" }
	body, _ := fill(`{}`, most-len(head), func(i int) string {
		sep := ","
		if i == 0 {
			sep = ""
		}
		return fmt.Sprintf(`%s"l%d":%s`, sep, i, list(200))
	})
	return strings.Replace(head, `"config": {}`, `"config": `+body, 1)
}

// wrongAddresses is a network selection of at most most bytes of elements
// asking for addresses that are not addresses, as many as fit: each a
// problem.
func wrongAddresses(most int) string {
	elem := `{"name": "net-a", "interface": "n%d", "ips": [` + strings.TrimSuffix(strings.Repeat(`"x",`, 240), ",") + `]}`
	var elems []string
	size := 2
	for i := 0; ; i++ {
		e := fmt.Sprintf(elem, i)
		if size+len(e)+1 > most || len(elems) == bounds.Items {
			break
		}
		elems = append(elems, e)
		size += len(e) + 1
	}
	return "[" + strings.Join(elems, ",") + "]"
}

// moreProblems reads the problems a refusal counts and does not say.
var moreProblems = regexp.MustCompile(`, and ([0-9]+) more\]`)

// refusal runs refuse, which refuses one input and returns what it says,
// and reports the size of what it says (error-bytes) and the problems it
// says and counts (problems), failing when it says more than refuseText.
func refusal(b *testing.B, refuse func() string) {
	b.Helper()
	msg := refuse()
	if msg == "" {
		b.Fatal("accepted")
	}
	if len(msg) > refuseText {
		b.Fatalf("said %d bytes, more than %d", len(msg), refuseText)
	}
	problems := 1
	if m := moreProblems.FindStringSubmatch(msg); m != nil {
		more, _ := strconv.Atoi(m[1])
		problems = bounds.Problems + more
	}
	b.ReportAllocs()
	before := cpuTime(b)
	for b.Loop() {
		refuse()
	}
	// The process's CPU time per refusal (the garbage collector's
	// included): its wall time on a machine that runs nothing else.
	b.ReportMetric(float64((cpuTime(b)-before).Nanoseconds())/float64(b.N), "cpu-ns/op")
	b.ReportMetric(float64(len(msg)), "error-bytes")
	b.ReportMetric(float64(problems), "problems")
}

// cpuTime is the CPU time the process has used, user and system.
func cpuTime(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkRefuse: the largest claim, CNI claim and network selection the
// bounds allow, each built to have the most problems, refused through the
// node's own path (Prepare of each driver, the runtime's RunPodSandbox
// hook), and inputs of twice a bound, refused before they are decoded.
// error-bytes is what the kubelet or the runtime is answered.
func BenchmarkRefuse(b *testing.B) {
	ctx := klog.NewContext(b.Context(), logr.Discard())
	b.Run("claim", func(b *testing.B) {
		// As many configs as the API allows, each at the bound.
		configs := make([]string, resourceapi.DeviceConfigMaxSize)
		for i := range configs {
			configs[i] = unknownFields(bounds.ConfigBytes)
		}
		refuseClaim(b, ctx, configs)
	})
	b.Run("claim-2x", func(b *testing.B) {
		refuseClaim(b, ctx, []string{unknownFields(2 * bounds.ConfigBytes)})
	})
	b.Run("cni", func(b *testing.B) { refuseCNI(b, ctx, hostPaths(bounds.ConfigBytes)) })
	b.Run("cni-2x", func(b *testing.B) { refuseCNI(b, ctx, hostPaths(2*bounds.ConfigBytes)) })
	b.Run("annotation", func(b *testing.B) { refuseSelection(b, ctx, wrongAddresses(bounds.AnnotationBytes)) })
	b.Run("annotation-2x", func(b *testing.B) {
		refuseSelection(b, ctx, strings.Repeat("A,", bounds.AnnotationBytes)+"A")
	})
}

// refuseClaim prepares a claim of fastpath.dev with configs, each applying
// to its one request, through the driver's PrepareResourceClaims.
func refuseClaim(b *testing.B, ctx context.Context, configs []string) {
	dir := b.TempDir()
	store, err := claims.Open(dir+"/state/checkpoint.json", claims.Legacy{})
	if err != nil {
		b.Fatal(err)
	}
	d, err := dra.New(dra.Options{NodeName: "node-a", PluginDir: dir + "/plugin", StateDir: dir + "/state", CDIDir: dir + "/cdi", PF: dratest.NopPF{}, Store: store})
	if err != nil {
		b.Fatal(err)
	}
	d.UseInventory(generatedInventory(b, 8))
	claim := benchClaim(devices.DriverName, devices.PCIDeviceName(sysfsfixture.Address(0, 0x3b, 1, 0)), configs)
	refusal(b, func() string {
		res, err := d.PrepareResourceClaims(ctx, []*resourceapi.ResourceClaim{claim})
		if err != nil || res[claim.UID].Err == nil {
			return ""
		}
		return res[claim.UID].Err.Error()
	})
}

// refuseCNI prepares a CNI claim of the parameters through the CNI
// driver's PrepareResourceClaims.
func refuseCNI(b *testing.B, ctx context.Context, params string) {
	store, err := claims.Open(b.TempDir()+"/checkpoint.json", claims.Legacy{})
	if err != nil {
		b.Fatal(err)
	}
	d, err := cnidriver.New(cnidriver.Options{NodeName: "node-a", PluginDir: b.TempDir(), Store: store, Devices: 1,
		Attributes: map[string]string{"name": "eth7"}, Policy: cnipolicy.Options{Plugins: cnipolicy.DefaultPlugins}})
	if err != nil {
		b.Fatal(err)
	}
	claim := benchClaim(cnidriver.DriverName, "cni-0", []string{params})
	refusal(b, func() string {
		res, err := d.PrepareResourceClaims(ctx, []*resourceapi.ResourceClaim{claim})
		if err != nil || res[claim.UID].Err == nil {
			return ""
		}
		return res[claim.UID].Err.Error()
	})
}

// refuseSelection runs the runtime's RunPodSandbox hook for a pod
// selecting networks with the annotation value.
func refuseSelection(b *testing.B, ctx context.Context, value string) {
	store, err := claims.Open(b.TempDir()+"/checkpoint.json", claims.Legacy{})
	if err != nil {
		b.Fatal(err)
	}
	p := nri.New(nri.Options{Store: store, NPWG: &nri.NPWGOptions{DefaultInterface: "eth0"}})
	pod := nri.Pod{UID: "pod-refused", Namespace: "default", Name: "web", SandboxID: "sandbox-1", NetNS: "/var/run/netns/web", Networks: value}
	refusal(b, func() string {
		if err := p.AttachPod(ctx, pod); err != nil {
			return bounds.Err(err).Error()
		}
		return ""
	})
}

// benchClaim is an allocated claim of one request of driver, its device
// given, with the parameters of that driver given.
func benchClaim(driver, device string, params []string) *resourceapi.ResourceClaim {
	claim := &resourceapi.ResourceClaim{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "refused", UID: types.UID("uid-refused-" + driver)},
		Spec: resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{Requests: []resourceapi.DeviceRequest{{
			Name: "nic", Exactly: &resourceapi.ExactDeviceRequest{DeviceClassName: "netdev.fastpath.dev", AllocationMode: resourceapi.DeviceAllocationModeExactCount, Count: 1},
		}}}},
		Status: resourceapi.ResourceClaimStatus{
			ReservedFor: []resourceapi.ResourceClaimConsumerReference{{Resource: "pods", Name: "p", UID: "pod-uid"}},
			Allocation: &resourceapi.AllocationResult{Devices: resourceapi.DeviceAllocationResult{
				Results: []resourceapi.DeviceRequestAllocationResult{{Request: "nic", Driver: driver, Pool: "node-a", Device: device}},
			}},
		},
	}
	for _, p := range params {
		claim.Status.Allocation.Devices.Config = append(claim.Status.Allocation.Devices.Config, resourceapi.DeviceAllocationConfiguration{
			Source: resourceapi.AllocationConfigSourceClaim,
			DeviceConfiguration: resourceapi.DeviceConfiguration{Opaque: &resourceapi.OpaqueDeviceConfiguration{
				Driver: driver, Parameters: runtime.RawExtension{Raw: []byte(p)},
			}},
		})
	}
	return claim
}

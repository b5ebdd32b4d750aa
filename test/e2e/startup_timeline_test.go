//go:build e2e && benche2e

package e2e

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/tools/cache"
)

// podTimes is when each step of one pod's start-up happened, on the
// machine's clock: what the test's watches saw as the events arrived, and
// what the kubelet's, containerd's and fastpathd's logs say (microseconds).
type podTimes struct {
	name, uid string
	kind      podKind

	created   time.Time // the test's Create call
	claimMade time.Time // the ResourceClaim made from the pod's template
	allocated time.Time // the scheduler's allocation in the claim's status
	bound     time.Time // the pod's spec.nodeName
	ready     time.Time // the pod's Ready condition
	status    time.Time // fastpath's device status in the claim

	kubelet       time.Time // the kubelet's "Pod update broadcasted" ADDED
	prepareStart  time.Time // the driver's Prepare of the pod's claim (fastpathd's log, the floor driver's own)
	prepareEnd    time.Time
	sandboxStart  time.Time // containerd's RunPodSandbox
	sandboxEnd    time.Time
	hookStart     time.Time // fastpathd's attach (the move floor's move), begun in its RunPodSandbox hook
	hookEnd       time.Time
	containerMade time.Time // containerd's CreateContainer returned
	containerEnd  time.Time // containerd's StartContainer returned
}

// podKind is what a pod of the benchmark claims.
type podKind int

const (
	plainPod    podKind = iota // no claim
	fastpathPod                // a fastpath netdev claim
	floorPod                   // a claim of the floor driver (startup_floor_test.go)
	movePod                    // a claim of the floor driver and the kernel's move (startup_move_test.go)
)

// timeline records, by watches, the start-up events of the pods (and of
// their claims) of the default namespace, and reads the rest from the
// logs once the pods are up.
type timeline struct {
	mu   sync.Mutex
	pods map[string]*podTimes
}

// watchTimeline starts the watches; they stop with ctx.
func watchTimeline(t *testing.T, ctx context.Context) *timeline {
	t.Helper()
	tl := &timeline{pods: map[string]*podTimes{}}
	f := informers.NewSharedInformerFactoryWithOptions(bed.Client(), 0, informers.WithNamespace("default"))
	pods := f.Core().V1().Pods().Informer()
	if _, err := pods.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { tl.pod(obj) },
		UpdateFunc: func(_, obj any) { tl.pod(obj) },
	}); err != nil {
		t.Fatal(err)
	}
	cls := f.Resource().V1().ResourceClaims().Informer()
	if _, err := cls.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { tl.claim(obj) },
		UpdateFunc: func(_, obj any) { tl.claim(obj) },
	}); err != nil {
		t.Fatal(err)
	}
	f.Start(ctx.Done())
	for typ, ok := range f.WaitForCacheSync(ctx.Done()) {
		if !ok {
			t.Fatalf("the %v watch never synced", typ)
		}
	}
	return tl
}

// creating registers a pod just before its Create call.
func (tl *timeline) creating(name string, kind podKind) {
	tl.mu.Lock()
	defer tl.mu.Unlock()
	tl.pods[name] = &podTimes{name: name, kind: kind, created: time.Now()}
}

func setOnce(at *time.Time, now time.Time) {
	if at.IsZero() {
		*at = now
	}
}

func (tl *timeline) pod(obj any) {
	now := time.Now()
	p, ok := obj.(*corev1.Pod)
	if !ok {
		return
	}
	tl.mu.Lock()
	defer tl.mu.Unlock()
	pt := tl.pods[p.Name]
	if pt == nil {
		return
	}
	pt.uid = string(p.UID)
	if p.Spec.NodeName != "" {
		setOnce(&pt.bound, now)
	}
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady && c.Status == corev1.ConditionTrue {
			setOnce(&pt.ready, now)
		}
	}
}

func (tl *timeline) claim(obj any) {
	now := time.Now()
	c, ok := obj.(*resourceapi.ResourceClaim)
	if !ok {
		return
	}
	tl.mu.Lock()
	defer tl.mu.Unlock()
	for _, o := range c.OwnerReferences {
		pt := tl.pods[o.Name]
		if o.Kind != "Pod" || pt == nil {
			continue
		}
		setOnce(&pt.claimMade, now)
		if c.Status.Allocation != nil {
			setOnce(&pt.allocated, now)
		}
		if len(c.Status.Devices) > 0 {
			setOnce(&pt.status, now)
		}
	}
}

// The log lines read: klog's header (the kubelet's, fastpathd's) and
// containerd's logrus text.
var (
	klogHeader        = `^[IWE](\d{4} \d\d:\d\d:\d\d\.\d{6})`
	kubeletAdded      = regexp.MustCompile(klogHeader + `.*"Pod update broadcasted" podUID="([^"]+)" type="ADDED"`)
	preparedLine      = regexp.MustCompile(klogHeader + `.*"Prepared claim".* pod="([^"]+)".*duration="([^"]+)"`)
	attachedLine      = regexp.MustCompile(klogHeader + `.*"Attached devices".* pod="default/([^"]+)".*duration="([^"]+)"`)
	sandboxStartLine  = regexp.MustCompile(`^time="([^"]+)".*msg="RunPodSandbox for name:\\"([^\\]+)\\" uid:\\"([^\\]+)\\" namespace:\\"default\\""$`)
	sandboxEndLine    = regexp.MustCompile(`^time="([^"]+)".*msg="RunPodSandbox for name:\\"[^\\]+\\" uid:\\"([^\\]+)\\" namespace:\\"default\\" returns sandbox id \\"([0-9a-f]+)\\""`)
	containerMadeLine = regexp.MustCompile(`^time="([^"]+)".*msg="CreateContainer within sandbox \\"([0-9a-f]+)\\" for name:.* returns container id \\"([0-9a-f]+)\\""`)
	containerUpLine   = regexp.MustCompile(`^time="([^"]+)".*msg="StartContainer for \\"([0-9a-f]+)\\" returns successfully"`)
)

// readLogs fills in, for every pod recorded, what the logs of the
// kubelet, containerd and the daemon say. Only events after the pod's
// creation count: the bed's logs hold earlier pods of the same names.
func (tl *timeline) readLogs(t *testing.T, daemonLog string) {
	t.Helper()
	tl.mu.Lock()
	defer tl.mu.Unlock()
	byUID := map[string]*podTimes{}
	var earliest time.Time
	for _, pt := range tl.pods {
		byUID[pt.uid] = pt
		if earliest.IsZero() || pt.created.Before(earliest) {
			earliest = pt.created
		}
	}
	year := earliest.Year()
	klogAt := func(s string) time.Time {
		at, err := time.ParseInLocation("2006 0102 15:04:05.000000", fmt.Sprintf("%d %s", year, s), time.Local)
		if err != nil {
			t.Fatalf("klog time %q: %v", s, err)
		}
		return at
	}
	after := func(pt *podTimes, at time.Time) bool { return pt != nil && !at.Before(pt.created) }
	logs := bed.Config().LogDir()

	eachLine(t, filepath.Join(logs, "kubelet.log"), func(line string) {
		if m := kubeletAdded.FindStringSubmatch(line); m != nil {
			if pt, at := byUID[m[2]], klogAt(m[1]); after(pt, at) {
				setOnce(&pt.kubelet, at)
			}
		}
	})
	eachLine(t, daemonLog, func(line string) {
		m := preparedLine.FindStringSubmatch(line)
		var hook bool
		if m == nil {
			m, hook = attachedLine.FindStringSubmatch(line), true
		}
		if m == nil {
			return
		}
		pt, at := tl.pods[m[2]], klogAt(m[1])
		d, err := time.ParseDuration(m[3])
		if err != nil || !after(pt, at) {
			return
		}
		if hook {
			setOnce(&pt.hookEnd, at)
			setOnce(&pt.hookStart, at.Add(-d))
		} else {
			setOnce(&pt.prepareEnd, at)
			setOnce(&pt.prepareStart, at.Add(-d))
		}
	})
	for _, pt := range tl.pods {
		if at, ok := floorPrepares.Load(pt.name); ok && (pt.kind == floorPod || pt.kind == movePod) {
			setOnce(&pt.prepareStart, at.([2]time.Time)[0])
			setOnce(&pt.prepareEnd, at.([2]time.Time)[1])
		}
		if at, ok := floorMoves.Load(pt.name); ok && pt.kind == movePod {
			setOnce(&pt.hookStart, at.([2]time.Time)[0])
			setOnce(&pt.hookEnd, at.([2]time.Time)[1])
		}
	}
	sandboxes, containers := map[string]*podTimes{}, map[string]*podTimes{}
	eachLine(t, filepath.Join(logs, "containerd.log"), func(line string) {
		rfc := func(s string) time.Time {
			at, err := time.Parse(time.RFC3339Nano, s)
			if err != nil {
				t.Fatalf("containerd time %q: %v", s, err)
			}
			return at
		}
		switch {
		case sandboxStartLine.MatchString(line):
			m := sandboxStartLine.FindStringSubmatch(line)
			if pt, at := byUID[m[3]], rfc(m[1]); after(pt, at) {
				setOnce(&pt.sandboxStart, at)
			}
		case sandboxEndLine.MatchString(line):
			m := sandboxEndLine.FindStringSubmatch(line)
			if pt, at := byUID[m[2]], rfc(m[1]); after(pt, at) {
				setOnce(&pt.sandboxEnd, at)
				sandboxes[m[3]] = pt
			}
		case containerMadeLine.MatchString(line):
			m := containerMadeLine.FindStringSubmatch(line)
			if pt := sandboxes[m[2]]; pt != nil {
				containers[m[3]] = pt
				setOnce(&pt.containerMade, rfc(m[1]))
			}
		case containerUpLine.MatchString(line):
			m := containerUpLine.FindStringSubmatch(line)
			if pt, at := containers[m[2]], rfc(m[1]); after(pt, at) {
				setOnce(&pt.containerEnd, at)
			}
		}
	})
}

func eachLine(t *testing.T, file string, f func(string)) {
	t.Helper()
	r, err := os.Open(file)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	s := bufio.NewScanner(r)
	s.Buffer(make([]byte, 0, 64<<10), 4<<20)
	for s.Scan() {
		f(s.Text())
	}
	if err := s.Err(); err != nil {
		t.Fatalf("%s: %v", file, err)
	}
}

// part is one stretch of a pod's start-up, from one recorded time to
// another; claimOnly parts are not measured for pods without a claim.
type part struct {
	name      string
	from, to  func(*podTimes) time.Time
	claimOnly bool
}

var startupParts = []part{
	{name: "creation to Ready (total)", from: func(p *podTimes) time.Time { return p.created }, to: func(p *podTimes) time.Time { return p.ready }},
	{name: "creation to the claim made from its template", claimOnly: true,
		from: func(p *podTimes) time.Time { return p.created }, to: func(p *podTimes) time.Time { return p.claimMade }},
	{name: "claim made to allocated", claimOnly: true,
		from: func(p *podTimes) time.Time { return p.claimMade }, to: func(p *podTimes) time.Time { return p.allocated }},
	{name: "creation to bound (scheduler)", from: func(p *podTimes) time.Time { return p.created }, to: func(p *podTimes) time.Time { return p.bound }},
	{name: "bound to the kubelet's ADDED", from: func(p *podTimes) time.Time { return p.bound }, to: func(p *podTimes) time.Time { return p.kubelet }},
	{name: "kubelet ADDED to RunPodSandbox", from: func(p *podTimes) time.Time { return p.kubelet }, to: func(p *podTimes) time.Time { return p.sandboxStart }},
	{name: "- of it: ADDED to Prepare begun (the kubelet, the helper's GET, its queue)", claimOnly: true,
		from: func(p *podTimes) time.Time { return p.kubelet }, to: func(p *podTimes) time.Time { return p.prepareStart }},
	{name: "- of it: NodePrepareResources in the driver", claimOnly: true,
		from: func(p *podTimes) time.Time { return p.prepareStart }, to: func(p *podTimes) time.Time { return p.prepareEnd }},
	{name: "- of it: Prepare returned to RunPodSandbox", claimOnly: true,
		from: func(p *podTimes) time.Time { return p.prepareEnd }, to: func(p *podTimes) time.Time { return p.sandboxStart }},
	{name: "RunPodSandbox (containerd)", from: func(p *podTimes) time.Time { return p.sandboxStart }, to: func(p *podTimes) time.Time { return p.sandboxEnd }},
	{name: "the attach, begun in the NRI RunPodSandbox hook", claimOnly: true,
		from: func(p *podTimes) time.Time { return p.hookStart }, to: func(p *podTimes) time.Time { return p.hookEnd }},
	{name: "- of it: after RunPodSandbox returned (beside the kubelet and the runtime)", claimOnly: true,
		from: func(p *podTimes) time.Time { return p.sandboxEnd }, to: func(p *podTimes) time.Time { return p.hookEnd }},
	{name: "sandbox to container created (NRI CreateContainer)", from: func(p *podTimes) time.Time { return p.sandboxEnd }, to: func(p *podTimes) time.Time { return p.containerMade }},
	{name: "container created to started (NRI StartContainer: the attach awaited)", from: func(p *podTimes) time.Time { return p.containerMade }, to: func(p *podTimes) time.Time { return p.containerEnd }},
	{name: "container started to Ready seen (kubelet status)", from: func(p *podTimes) time.Time { return p.containerEnd }, to: func(p *podTimes) time.Time { return p.ready }},
	{name: "attached to the claim's device status seen (off the pod's path)", claimOnly: true,
		from: func(p *podTimes) time.Time { return p.hookEnd }, to: func(p *podTimes) time.Time { return p.status }},
}

// durations is the part for each pod of the kind that has both its ends.
func (tl *timeline) durations(pt part, kind podKind) []time.Duration {
	tl.mu.Lock()
	defer tl.mu.Unlock()
	var out []time.Duration
	for _, p := range tl.pods {
		from, to := pt.from(p), pt.to(p)
		if p.kind == kind && !from.IsZero() && !to.IsZero() {
			out = append(out, to.Sub(from))
		}
	}
	return out
}

// printBreakdown prints each part's p50 and p90 for pods without a claim,
// with a fastpath claim, with a claim of the floor driver and with that
// claim and the kernel's move (the move floor), what the fastpath claim
// adds at p50, and what it adds over the floor's and the move floor's.
func (tl *timeline) printBreakdown(title string) {
	fmt.Printf("\n%s\n\n", title)
	fmt.Printf("| part | without a claim p50 / p90 | with a fastpath claim p50 / p90 | with a floor driver's claim p50 / p90 | with the floor's claim and the kernel's move p50 / p90 | the fastpath claim adds (p50) | over the floor's (p50) | over the move floor's (p50) | pods |\n|---|---|---|---|---|---|---|---|---|\n")
	diff := func(a, b []time.Duration) string {
		if len(a) == 0 || len(b) == 0 {
			return "-"
		}
		return (pctOf(a, 50) - pctOf(b, 50)).Round(100 * time.Microsecond).String()
	}
	for _, pt := range startupParts {
		with, floor, move := tl.durations(pt, fastpathPod), tl.durations(pt, floorPod), tl.durations(pt, movePod)
		var without []time.Duration
		plain, added := "-", "-"
		if !pt.claimOnly {
			without = tl.durations(pt, plainPod)
			plain = pct(without, 50) + " / " + pct(without, 90)
			added = diff(with, without)
		}
		fmt.Printf("| %s | %s | %s / %s | %s / %s | %s / %s | %s | %s | %s | %d+%d+%d+%d |\n", pt.name, plain, pct(with, 50), pct(with, 90),
			pct(floor, 50), pct(floor, 90), pct(move, 50), pct(move, 90), added, diff(with, floor), diff(with, move),
			len(without), len(with), len(floor), len(move))
	}
	fmt.Println()
}

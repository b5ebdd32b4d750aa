package status

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"
	"k8s.io/klog/v2/ktesting"

	"github.com/fastpath-dra/fastpath/dra/dratest"
)

// claimsOn stores n allocated claims of one device each on the server.
func claimsOn(s *dratest.APIServer, n int) []ClaimRef {
	refs := make([]ClaimRef, n)
	for i := range refs {
		name := fmt.Sprintf("c-%04d", i)
		s.AddClaim(allocatedClaim(name, types.UID("uid-"+name), "dev-a"))
		refs[i] = ClaimRef{Namespace: "default", Name: name, UID: types.UID("uid-" + name)}
	}
	return refs
}

// statusOf is a status of dev-a whose message says which change it is.
func statusOf(change int) resourceapi.AllocatedDeviceStatus {
	return NotReady("fastpath.dev", "node-a", "dev-a", ReasonNotReady, fmt.Sprintf("change %d", change))
}

// message is the message of dev-a's condition in the stored claim.
func message(s *dratest.APIServer, ref ClaimRef) string {
	c := s.Claim(ref.Namespace, ref.Name)
	if c == nil || len(c.Status.Devices) != 1 || len(c.Status.Devices[0].Conditions) == 0 {
		return ""
	}
	return c.Status.Devices[0].Conditions[0].Message
}

// claimRequests counts the requests of claims the server answered with
// code since the index from.
func claimRequests(s *dratest.APIServer, from int, verb string, code int) (n int, names map[string]bool) {
	names = map[string]bool{}
	for _, r := range s.Requests()[from:] {
		if strings.HasPrefix(r.Resource, "resourceclaims") && (verb == "" || r.Verb == verb) && r.Code == code {
			n++
			names[r.Name] = true
		}
	}
	return n, names
}

// logsAt are the entries logged at verbosity 0 (errors included).
func logsAt0(logger klog.Logger) []string {
	var out []string
	for _, e := range logger.GetSink().(ktesting.Underlier).GetBuffer().Data() {
		if e.Verbosity == 0 {
			out = append(out, e.Message)
		}
	}
	return out
}

// An API server down with a hundred claims' statuses waiting is one
// outage of the queue: one line says it began, one retry at a time finds
// out when it ends (not one per claim), each claim is one entry however
// often its status changes, and when it is back each claim is written
// once, with its latest status, and one line says so.
func TestWriterOutage(t *testing.T) {
	logger := ktesting.NewLogger(t, ktesting.NewConfig(ktesting.BufferLogs(true), ktesting.Verbosity(0)))
	ctx, cancel := context.WithCancel(klog.NewContext(context.Background(), logger))
	defer cancel()
	s := dratest.NewAPIServer(t)
	client, err := kubernetes.NewForConfig(s.Config())
	if err != nil {
		t.Fatal(err)
	}
	refs := claimsOn(s, 100)
	s.SetDown(dratest.Unavailable)
	w := NewWriter(client)
	w.Backoff, w.MaxBackoff, w.Probe = time.Millisecond, 5*time.Millisecond, nil
	w.Start(ctx)
	for _, ref := range refs {
		w.Set(ctx, ref, statusOf(0))
	}
	// Long enough for every claim to have retried many times on a timer
	// of its own.
	if err := wait.PollUntilContextTimeout(ctx, time.Millisecond, 20*time.Second, true, func(context.Context) (bool, error) {
		n, _ := claimRequests(s, 0, "", 503)
		return n >= 50, nil
	}); err != nil {
		t.Fatal("the writes were not retried")
	}
	for change := 1; change <= 5; change++ {
		for _, ref := range refs {
			w.Set(ctx, ref, statusOf(change))
		}
	}
	if n := w.Pending(); n != len(refs) {
		t.Errorf("%d statuses pending, want one per claim (%d)", n, len(refs))
	}
	failed, names := claimRequests(s, 0, "", 503)
	if len(names) > 4 {
		t.Errorf("%d failed requests during the outage touched %d claims, want a retry of the first claims only: each claim retries on its own", failed, len(names))
	}
	if logs := logsAt0(logger); len(logs) != 1 {
		t.Errorf("the outage's start was logged in %d lines, want 1:\n%s", len(logs), strings.Join(logs, "\n"))
	}

	back := len(s.Requests())
	s.SetDown(dratest.Up)
	w.Wait()
	for _, ref := range refs {
		if got := message(s, ref); got != "change 5" {
			t.Fatalf("claim %s has the status of %q, want the latest, change 5", ref.Name, got)
		}
	}
	// A write under way when it came back (one of each worker's at the
	// most) wrote an earlier status, and its claim is written again.
	if n, _ := claimRequests(s, back, "update", 200); n < len(refs) || n > len(refs)+4 {
		t.Errorf("%d status updates after the outage, want one per claim (%d), and one more for each write under way when it came back (4 at the most)", n, len(refs))
	}
	logs := logsAt0(logger)
	if len(logs) != 2 {
		t.Errorf("the outage was logged in %d lines, want 2 (its start and end):\n%s", len(logs), strings.Join(logs, "\n"))
	}
}

// An API server that answers but refuses every claim's status write (a
// 500) is logged in one line for the whole writer, not one per claim,
// while every claim retries on its backoff; once it takes them, each
// claim's status lands.
func TestWriterRefusedLoggedOnce(t *testing.T) {
	logger := ktesting.NewLogger(t, ktesting.NewConfig(ktesting.BufferLogs(true), ktesting.Verbosity(0)))
	ctx, cancel := context.WithCancel(klog.NewContext(context.Background(), logger))
	defer cancel()
	s := dratest.NewAPIServer(t)
	client, err := kubernetes.NewForConfig(s.Config())
	if err != nil {
		t.Fatal(err)
	}
	refs := claimsOn(s, 100)
	var refusing atomic.Bool
	refusing.Store(true)
	s.Refuse = func(verb, resource string) int {
		if refusing.Load() && resource == "resourceclaims/status" {
			return 500
		}
		return 0
	}
	w := NewWriter(client)
	w.Backoff, w.MaxBackoff, w.Probe = time.Millisecond, 5*time.Millisecond, nil
	w.Start(ctx)
	for _, ref := range refs {
		w.Set(ctx, ref, statusOf(0))
	}
	if err := wait.PollUntilContextTimeout(ctx, time.Millisecond, 20*time.Second, true, func(context.Context) (bool, error) {
		_, names := claimRequests(s, 0, "update", 500)
		return len(names) == len(refs), nil
	}); err != nil {
		t.Fatal("not every claim's write was tried")
	}
	if logs := logsAt0(logger); len(logs) != 1 {
		t.Errorf("the refused writes of %d claims were logged in %d lines, want 1:\n%s", len(refs), len(logs), strings.Join(logs, "\n"))
	}
	refusing.Store(false)
	w.Wait()
	for _, ref := range refs {
		if got := message(s, ref); got != "change 0" {
			t.Fatalf("claim %s has the status of %q, want change 0", ref.Name, got)
		}
	}
}

// A status written once costs one request the next time (the update, with
// the claim as it was written), a claim changed in between is read again,
// and so is one whose kept copy has the status already.
func TestWriterKeepsTheClaim(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	s := dratest.NewAPIServer(t)
	client, err := kubernetes.NewForConfig(s.Config())
	if err != nil {
		t.Fatal(err)
	}
	ref := claimsOn(s, 1)[0]
	w := NewWriter(client)
	w.Start(ctx)
	w.Set(ctx, ref, statusOf(1))
	w.Wait()
	from := len(s.Requests())
	w.Set(ctx, ref, statusOf(2))
	w.Wait()
	if rs := s.Requests()[from:]; len(rs) != 1 || rs[0].Verb != "update" || rs[0].Code != 200 {
		t.Errorf("the second status took the requests %+v, want one update", rs)
	}
	// Changed by someone else: the update conflicts, the claim is read
	// and written again.
	c := s.Claim(ref.Namespace, ref.Name)
	c.Status.Devices = append(c.Status.Devices, resourceapi.AllocatedDeviceStatus{Driver: "other.example.com", Pool: "p", Device: "d"})
	s.AddClaim(c)
	w.Set(ctx, ref, statusOf(3))
	w.Wait()
	got := s.Claim(ref.Namespace, ref.Name)
	if len(got.Status.Devices) != 2 || got.Status.Devices[0].Conditions[0].Message != "change 3" {
		t.Errorf("after a conflict the status is %+v, want change 3 and the other driver's entry", got.Status.Devices)
	}
	// Its status dropped by someone else, then set again as it was.
	got.Status.Devices = got.Status.Devices[1:]
	s.AddClaim(got)
	w.Set(ctx, ref, statusOf(3))
	w.Wait()
	got = s.Claim(ref.Namespace, ref.Name)
	if len(got.Status.Devices) != 2 || got.Status.Devices[1].Device != "dev-a" || got.Status.Devices[1].Conditions[0].Message != "change 3" {
		t.Errorf("the status set again as it was is %+v, want it written again", got.Status.Devices)
	}
}

// A claim as its Prepare read it is where its first status write starts:
// one update, no read. One changed since that read conflicts, and is read
// and written again at once.
func TestWriterStartsFromTheClaimSeen(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	s := dratest.NewAPIServer(t)
	client, err := kubernetes.NewForConfig(s.Config())
	if err != nil {
		t.Fatal(err)
	}
	refs := claimsOn(s, 2)
	w := NewWriter(client)
	w.Start(ctx)

	w.Seen(s.Claim(refs[0].Namespace, refs[0].Name))
	from := len(s.Requests())
	w.Set(ctx, refs[0], statusOf(1))
	w.Wait()
	if rs := s.Requests()[from:]; len(rs) != 1 || rs[0].Verb != "update" || rs[0].Code != 200 {
		t.Errorf("the first status of a claim seen at Prepare took the requests %+v, want one update", rs)
	}
	if got := message(s, refs[0]); got != "change 1" {
		t.Errorf("status %q, want change 1", got)
	}

	// Seen, then changed by someone else before the first write.
	w.Seen(s.Claim(refs[1].Namespace, refs[1].Name))
	c := s.Claim(refs[1].Namespace, refs[1].Name)
	c.Status.Devices = append(c.Status.Devices, resourceapi.AllocatedDeviceStatus{Driver: "other.example.com", Pool: "p", Device: "d"})
	s.AddClaim(c)
	from = len(s.Requests())
	w.Set(ctx, refs[1], statusOf(2))
	w.Wait()
	conflicts, _ := claimRequests(s, from, "update", 409)
	reads, _ := claimRequests(s, from, "get", 200)
	got := s.Claim(refs[1].Namespace, refs[1].Name)
	if conflicts != 1 || reads != 1 || len(got.Status.Devices) != 2 || got.Status.Devices[1].Conditions[0].Message != "change 2" {
		t.Errorf("a claim changed since it was seen: %d conflicts, %d reads, status %+v; want one of each, the other driver's entry kept and change 2",
			conflicts, reads, got.Status.Devices)
	}

	// A claim written since is not taken back to what Prepare read.
	old := s.Claim(refs[0].Namespace, refs[0].Name)
	old.ResourceVersion = "1"
	w.Seen(old)
	from = len(s.Requests())
	w.Set(ctx, refs[0], statusOf(3))
	w.Wait()
	if rs := s.Requests()[from:]; len(rs) != 1 || rs[0].Verb != "update" || rs[0].Code != 200 {
		t.Errorf("a claim written since it was seen took the requests %+v, want one update", rs)
	}
}

package dataplane

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
)

// blockingPlugin is a CNI plugin (CNI 1.1) whose ADD logs its container to
// started and then holds until release exists in its directory.
const blockingPlugin = `#!/bin/sh
dir=$(dirname "$0")
cat >/dev/null
case "$CNI_COMMAND" in
VERSION) echo '{"cniVersion":"1.1.0","supportedVersions":["1.0.0","1.1.0"]}' ;;
ADD) echo "$CNI_CONTAINERID" >>"$dir/started"
     while [ ! -e "$dir/release" ]; do sleep 0.01; done
     echo '{"cniVersion":"1.1.0","interfaces":[{"name":"'"$CNI_IFNAME"'","sandbox":"'"$CNI_NETNS"'"}]}' ;;
esac
`

// A bound of 2: of 5 ADDs at once, 2 plugins run and 3 wait, in order; a
// wait whose context ends says which bound held it; released, the others
// run, never more than 2 at once.
func TestCNILimit(t *testing.T) {
	bin := t.TempDir()
	if err := os.WriteFile(filepath.Join(bin, "blocking"), []byte(blockingPlugin), 0o755); err != nil {
		t.Fatal(err)
	}
	limit := NewCNILimit(2)
	c := NewCNI([]string{bin}, t.TempDir(), limit)
	net := func(container string) CNINetwork {
		return CNINetwork{Conflist: []byte(`{"cniVersion": "1.1.0", "name": "limited", "plugins": [{"type": "blocking"}]}`),
			ContainerID: container, NetNS: "/run/netns/none", IfName: "net1"}
	}
	started := func() []string {
		data, _ := os.ReadFile(filepath.Join(bin, "started"))
		return strings.Fields(string(data))
	}
	poll := func(what string, cond func() bool) {
		t.Helper()
		err := wait.PollUntilContextTimeout(t.Context(), 10*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) { return cond(), nil })
		if err != nil {
			t.Fatalf("%s: running %d, waiting %d, started %v", what, limit.Running(), limit.Waiting(), started())
		}
	}

	var wg sync.WaitGroup
	errs := make([]error, 5)
	cancelled, cancel := context.WithCancel(t.Context())
	defer cancel()
	add := func(i int, ctx context.Context) {
		wg.Go(func() { _, errs[i] = c.Add(ctx, net(string(rune('a'+i)))) })
	}
	for i := range 2 {
		add(i, t.Context())
	}
	poll("two plugins running", func() bool { return limit.Running() == 2 && len(started()) == 2 })
	add(2, cancelled)
	poll("one waiting", func() bool { return limit.Waiting() == 1 })
	for i := 3; i < 5; i++ {
		add(i, t.Context())
	}
	poll("three waiting", func() bool { return limit.Waiting() == 3 })
	if got := started(); len(got) != 2 {
		t.Fatalf("started %v with a bound of 2", got)
	}

	cancel()
	poll("the cancelled one gone", func() bool { return limit.Waiting() == 2 })
	if err := os.WriteFile(filepath.Join(bin, "release"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	if !errors.Is(errs[2], context.Canceled) || !strings.Contains(errs[2].Error(), "--cni-max-plugins") {
		t.Errorf("the ADD whose context ended while it waited: %v, want it to name --cni-max-plugins", errs[2])
	}
	for i, err := range errs {
		if i != 2 && err != nil {
			t.Errorf("ADD %d: %v", i, err)
		}
	}
	if got := started(); len(got) != 4 {
		t.Errorf("started %v, want the 4 not cancelled", got)
	}
	if limit.Running() != 0 || limit.Waiting() != 0 {
		t.Errorf("after: running %d, waiting %d", limit.Running(), limit.Waiting())
	}
}

// No bound: a nil limit, as --cni-max-plugins 0 gives.
func TestCNILimitNone(t *testing.T) {
	if l := NewCNILimit(0); l != nil || l.Max() != 0 || l.Running() != 0 || l.Waiting() != 0 {
		t.Errorf("NewCNILimit(0) = %v", l)
	}
}

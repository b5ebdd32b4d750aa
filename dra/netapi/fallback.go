package netapi

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/containernetworking/cni/libcni"
	"github.com/fsnotify/fsnotify"
	"google.golang.org/protobuf/proto"
	"k8s.io/klog/v2"
)

// fallback is "_fallback": the first CNI configuration of the directory.
type fallback struct {
	config   *NetworkConfig // nil when the directory has none
	conflist []byte         // what libcni runs
	source   string         // the file
	problem  string         // why there is none, or files passed over
}

// confExtensions are the CNI configuration files, as container runtimes
// read them.
var confExtensions = []string{".conf", ".conflist", ".json"}

// readFallback finds the first file of dir, in name order, that is a CNI
// configuration; files that are not are passed over and named.
func readFallback(dir string) fallback {
	files, err := libcni.ConfFiles(dir, confExtensions)
	if err != nil {
		return fallback{problem: fmt.Sprintf("read %s: %v", dir, err)}
	}
	sort.Strings(files)
	var skipped []string
	for _, f := range files {
		fb, err := fallbackFromFile(f)
		if err != nil {
			skipped = append(skipped, fmt.Sprintf("%s (%v)", filepath.Base(f), err))
			continue
		}
		if len(skipped) > 0 {
			fb.problem = "passed over: " + strings.Join(skipped, "; ")
		}
		return fb
	}
	problem := fmt.Sprintf("no CNI configuration (%s) in %s", strings.Join(confExtensions, ", "), dir)
	if len(skipped) > 0 {
		problem += "; passed over: " + strings.Join(skipped, "; ")
	}
	return fallback{problem: problem}
}

func fallbackFromFile(path string) (fallback, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return fallback{}, err
	}
	c, err := FromConflist(data)
	if err != nil {
		return fallback{}, err
	}
	cfg := &NetworkConfig{Metadata: &NetworkMetadata{Name: FallbackName}, NetworkType: NetworkType_CNIv1, Cniv1Config: c}
	conflist, err := Conflist(cfg)
	if err != nil {
		return fallback{}, err
	}
	if _, err := libcni.ConfListFromBytes(conflist); err != nil {
		return fallback{}, err
	}
	return fallback{config: cfg, conflist: conflist, source: path}, nil
}

func (fb fallback) podNetwork(ctx context.Context, c checker) *PodNetworkResponse {
	if fb.config == nil {
		return &PodNetworkResponse{
			Config: &NetworkConfig{Metadata: &NetworkMetadata{Name: FallbackName}},
			Status: &NetworkStatus{Message: fb.problem},
		}
	}
	st := c.status(ctx, fb.conflist)
	msg := []string{"from " + fb.source}
	if st.Message != "" {
		msg = append(msg, st.Message)
	}
	if fb.problem != "" {
		msg = append(msg, fb.problem)
	}
	st.Message = strings.Join(msg, "; ")
	return &PodNetworkResponse{Config: proto.CloneOf(fb.config), Status: st}
}

func (r *Registry) reloadFallback(ctx context.Context) {
	fb := readFallback(r.opts.CNIConfDir)
	r.mu.Lock()
	changed := fb.source != r.fallback.source || string(fb.conflist) != string(r.fallback.conflist) || fb.problem != r.fallback.problem
	r.fallback = fb
	r.mu.Unlock()
	switch {
	case !changed:
	case fb.config == nil:
		// Not listed: this says why.
		klog.FromContext(ctx).Info("No CNI configuration: "+FallbackName+" is not listed until one is there", "dir", r.opts.CNIConfDir, "problem", fb.problem)
	default:
		klog.FromContext(ctx).Info("CNI configuration read", "network", FallbackName, "file", fb.source, "problem", fb.problem)
	}
}

// watchRetry is how often a CNI configuration directory that cannot be
// watched (it does not exist yet) is tried again.
const watchRetry = 5 * time.Second

// Run keeps "_fallback" current: it reads the CNI configuration directory
// again whenever something in it changes, until ctx ends. A directory
// that does not exist yet is waited for.
func (r *Registry) Run(ctx context.Context) error {
	if r.opts.CNIConfDir == "" {
		<-ctx.Done()
		return nil
	}
	logger := klog.FromContext(ctx)
	w, err := fsnotify.NewWatcher()
	if err != nil {
		return fmt.Errorf("watch %s: %w", r.opts.CNIConfDir, err)
	}
	defer func() { _ = w.Close() }()
	retry := time.NewTicker(watchRetry)
	defer retry.Stop()
	watching := false
	for {
		if !watching {
			if err := w.Add(r.opts.CNIConfDir); err == nil {
				watching = true
				retry.Stop()
				r.reloadFallback(ctx)
			} else if !errors.Is(err, os.ErrNotExist) {
				logger.Error(err, "Cannot watch the CNI configuration directory; trying again", "dir", r.opts.CNIConfDir)
			}
		}
		select {
		case <-ctx.Done():
			return nil
		case <-retry.C:
		case ev, ok := <-w.Events:
			if !ok {
				return nil
			}
			if ev.Name == r.opts.CNIConfDir && (ev.Has(fsnotify.Remove) || ev.Has(fsnotify.Rename)) {
				// The directory went: wait for it to come back.
				watching = false
				retry.Reset(watchRetry)
			}
			r.reloadFallback(ctx)
		case err, ok := <-w.Errors:
			if !ok {
				return nil
			}
			logger.Error(err, "Watching the CNI configuration directory", "dir", r.opts.CNIConfDir)
			r.reloadFallback(ctx)
		}
	}
}

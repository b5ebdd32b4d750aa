package dataplane

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync/atomic"

	"github.com/containernetworking/cni/pkg/invoke"
	"github.com/containernetworking/cni/pkg/version"
)

// CNILimit bounds how many CNI plugin processes run at once, for every
// CNI that shares it: each plugin of a chain, and each STATUS, CHECK, DEL
// or GC, takes a slot while its process runs and queues, in order, while
// none is free. The plugins are the daemon's children, within its memory
// limit: a burst of pods starting would otherwise start as many plugins
// as it has networks, all at once.
type CNILimit struct {
	slots            chan struct{}
	running, waiting atomic.Int64
}

// NewCNILimit allows n plugins at once; n < 1 allows any number (nil).
func NewCNILimit(n int) *CNILimit {
	if n < 1 {
		return nil
	}
	return &CNILimit{slots: make(chan struct{}, n)}
}

// Max is how many plugins run at once at most; 0 for no bound.
func (l *CNILimit) Max() int {
	if l == nil {
		return 0
	}
	return cap(l.slots)
}

// Running is how many plugins run now.
func (l *CNILimit) Running() int {
	if l == nil {
		return 0
	}
	return int(l.running.Load())
}

// Waiting is how many plugins wait for a slot now.
func (l *CNILimit) Waiting() int {
	if l == nil {
		return 0
	}
	return int(l.waiting.Load())
}

// acquire waits for a slot, or for ctx to end.
func (l *CNILimit) acquire(ctx context.Context) (release func(), err error) {
	if l == nil {
		return func() {}, nil
	}
	select {
	case l.slots <- struct{}{}:
	default:
		l.waiting.Add(1)
		select {
		case l.slots <- struct{}{}:
			l.waiting.Add(-1)
		case <-ctx.Done():
			l.waiting.Add(-1)
			return nil, ctx.Err()
		}
	}
	l.running.Add(1)
	return func() {
		l.running.Add(-1)
		<-l.slots
	}, nil
}

// limitedExec runs plugins as libcni does by default, each within a slot
// of its limit.
type limitedExec struct {
	invoke.Exec
	limit *CNILimit
}

func newExec(limit *CNILimit) invoke.Exec {
	def := &invoke.DefaultExec{RawExec: &invoke.RawExec{Stderr: os.Stderr}, PluginDecoder: version.PluginDecoder{}}
	if limit == nil {
		return def
	}
	return limitedExec{Exec: def, limit: limit}
}

func (e limitedExec) ExecPlugin(ctx context.Context, pluginPath string, stdinData []byte, environ []string) ([]byte, error) {
	release, err := e.limit.acquire(ctx)
	if err != nil {
		return nil, fmt.Errorf("CNI plugin %s waited for one of the %d plugins that may run at once (--cni-max-plugins): %w",
			filepath.Base(pluginPath), e.limit.Max(), err)
	}
	defer release()
	return e.Exec.ExecPlugin(ctx, pluginPath, stdinData, environ)
}

package dra

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"k8s.io/klog/v2"

	"github.com/fastpath-dra/fastpath/dataplane"
	"github.com/fastpath-dra/fastpath/dataplane/fault"
	"github.com/fastpath-dra/fastpath/dra/claims"
)

// step is one side effect of Prepare and its undo. Both are idempotent:
// a retried Prepare does every step again, and undoing a step that never
// ran, or ran halfway, is harmless.
type step struct {
	name  string
	apply func(context.Context) error
	undo  func(context.Context) error
	// dev is the device the step acts on, nil for the claim's own steps.
	dev *claims.Device
}

// kind is what the step does (its name without the request).
func (s step) kind() string {
	kind, _, _ := strings.Cut(s.name, " ")
	return kind
}

// stepRunner does a claim's steps with every one recorded in the store
// before and after it runs. The caller holds the claim's lock.
type stepRunner struct {
	store *claims.Store
}

// run does the steps in order and marks the claim prepared. A step is
// recorded as started before it runs, unless an earlier record says so
// already (the caller may record the first with the plan), and as done
// after; the done mark of one step and the start of the next are one
// write. If a step fails, or its record cannot be written, every step that
// started is undone in reverse and the claim is forgotten; what cannot be
// undone stays recorded for the next Prepare or Unprepare to finish.
func (r stepRunner) run(ctx context.Context, c *claims.Claim, steps []step) error {
	for i, s := range steps {
		if err := ctx.Err(); err != nil {
			// The caller gave up: the steps done stay recorded, as after
			// a crash, for the next Prepare to finish or Unprepare to
			// undo.
			return fmt.Errorf("before step %s: %w", s.name, err)
		}
		if c.StepState(s.name) == "" {
			c.SetStep(s.name, claims.StepStarted)
			if err := r.store.Put(*c); err != nil {
				c.DropStep(s.name)
				return r.abort(ctx, c, steps[:i], fmt.Errorf("record step %s: %w", s.name, err))
			}
		}
		fault.Point("prepare." + s.kind() + ".before")
		if err := s.apply(ctx); err != nil {
			return r.abort(ctx, c, steps[:i+1], err)
		}
		fault.Point("prepare." + s.kind() + ".applied")
		c.SetStep(s.name, claims.StepDone)
		if i+1 < len(steps) {
			c.SetStep(steps[i+1].name, claims.StepStarted)
		} else {
			c.Prepared, c.Steps = true, nil
		}
		if err := r.store.Put(*c); err != nil {
			c.Prepared = false
			for _, done := range steps[:i+1] {
				c.SetStep(done.name, claims.StepDone)
			}
			return r.abort(ctx, c, steps[:i+1], fmt.Errorf("record step %s: %w", s.name, err))
		}
	}
	return nil
}

// abort undoes the steps after cause and forgets the claim.
func (r stepRunner) abort(ctx context.Context, c *claims.Claim, steps []step, cause error) error {
	if _, err := r.undo(ctx, c, steps); err != nil {
		return fmt.Errorf("%w (and undoing it: %w)", cause, err)
	}
	if err := r.store.Delete(c.Key()); err != nil {
		return fmt.Errorf("%w (and forgetting the claim: %w)", cause, err)
	}
	return cause
}

// undo undoes, in reverse, the steps that started, going on past failures.
// A step whose device is gone from the node has nothing to undo: it is
// logged and counted done, and its device returned in gone. The steps
// undone are dropped from the record; if some fail, the record is written
// with those left, and the error names them.
func (r stepRunner) undo(ctx context.Context, c *claims.Claim, steps []step) (gone []*claims.Device, _ error) {
	logger := klog.FromContext(ctx)
	var errs []error
	prepared := c.Prepared
	var left []claims.Step
	for i := len(steps) - 1; i >= 0; i-- {
		s := steps[i]
		state := c.StepState(s.name)
		if state == "" {
			continue
		}
		err := s.undo(ctx)
		switch {
		case err == nil:
		case errors.Is(err, dataplane.ErrDeviceGone):
			logger.Info("Not restoring what is gone", "claim", c.String(), "step", s.name, "reason", err.Error())
			if s.dev != nil && !slices.Contains(gone, s.dev) {
				gone = append(gone, s.dev)
			}
		default:
			errs = append(errs, fmt.Errorf("undo %s: %w", s.name, err))
			left = append([]claims.Step{{Name: s.name, State: state}}, left...)
		}
	}
	if len(errs) == 0 {
		return gone, nil
	}
	c.Prepared, c.Steps = false, left
	if err := r.store.Put(*c); err != nil {
		errs = append(errs, err)
		c.Prepared = prepared
	}
	return gone, errors.Join(errs...)
}

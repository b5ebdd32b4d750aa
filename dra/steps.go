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

// run does the steps in order and marks the claim prepared. Every step is
// recorded as started before any runs, in one write unless an earlier
// record says so already (the caller records them with the plan), and all
// as done in the write that marks the claim prepared: a claim costs two
// waits for the disk, however many its steps. A step recorded as started
// may have run, or not, or halfway: each is idempotent and its undo
// harmless if it never ran, so the next Prepare does them all again and
// Unprepare (or the start's Reconcile) undoes them all. If a step fails,
// or the record cannot be written, every step that started is undone in
// reverse and the claim is forgotten; what cannot be undone stays
// recorded for the next Prepare or Unprepare to finish.
func (r stepRunner) run(ctx context.Context, c *claims.Claim, steps []step) error {
	var unrecorded []string
	for _, s := range steps {
		if c.StepState(s.name) == "" {
			unrecorded = append(unrecorded, s.name)
		}
	}
	if len(unrecorded) > 0 {
		for _, name := range unrecorded {
			c.SetStep(name, claims.StepStarted)
		}
		if err := r.store.Put(*c); err != nil {
			for _, name := range unrecorded {
				c.DropStep(name)
			}
			return r.abort(ctx, c, steps, fmt.Errorf("record the steps: %w", err))
		}
	}
	for _, s := range steps {
		if err := ctx.Err(); err != nil {
			// The caller gave up: the steps stay recorded, as after a
			// crash, for the next Prepare to finish or Unprepare to
			// undo; those done are marked so, if the store takes it.
			err = fmt.Errorf("before step %s: %w", s.name, err)
			if perr := r.store.Put(*c); perr != nil {
				err = fmt.Errorf("%w (and recording the steps done: %w)", err, perr)
			}
			return err
		}
		fault.Point("prepare." + s.kind() + ".before")
		if err := s.apply(ctx); err != nil {
			return r.abort(ctx, c, steps, err)
		}
		fault.Point("prepare." + s.kind() + ".applied")
		c.SetStep(s.name, claims.StepDone)
	}
	c.Prepared, c.Steps = true, nil
	if err := r.store.Put(*c); err != nil {
		c.Prepared = false
		for _, s := range steps {
			c.SetStep(s.name, claims.StepDone)
		}
		return r.abort(ctx, c, steps, fmt.Errorf("record the claim prepared: %w", err))
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

package testbed

import (
	"context"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"
	watchtools "k8s.io/client-go/tools/watch"
)

// WorkloadPod is a pod running the bed's workload image with args, on the
// bed's node, with nothing pulled and no service account token mounted.
func WorkloadPod(namespace, name string, args ...string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name},
		Spec: corev1.PodSpec{
			AutomountServiceAccountToken:  new(false),
			TerminationGracePeriodSeconds: new(int64(1)),
			Containers: []corev1.Container{{
				Name:            "workload",
				Image:           WorkloadImage,
				ImagePullPolicy: corev1.PullNever,
				Args:            args,
			}},
		},
	}
}

// RunPod creates pod and waits until it runs with every container ready.
func (b *Bed) RunPod(ctx context.Context, pod *corev1.Pod) (*corev1.Pod, error) {
	created, err := b.client.CoreV1().Pods(pod.Namespace).Create(ctx, pod, metav1.CreateOptions{})
	if err != nil {
		return nil, fmt.Errorf("create pod %s/%s: %w", pod.Namespace, pod.Name, err)
	}
	return b.WaitPod(ctx, created.Namespace, created.Name, 90*time.Second, podReady)
}

// PodReady is a WaitPod condition: the pod is Ready; an error once it
// ended.
func PodReady(p *corev1.Pod) (bool, error) { return podReady(p) }

func podReady(p *corev1.Pod) (bool, error) {
	if p.Status.Phase == corev1.PodFailed || p.Status.Phase == corev1.PodSucceeded {
		return false, fmt.Errorf("pod %s/%s ended in phase %s: %s", p.Namespace, p.Name, p.Status.Phase, p.Status.Message)
	}
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady && c.Status == corev1.ConditionTrue {
			return true, nil
		}
	}
	return false, nil
}

// WaitPod watches the pod until done says so or returns an error: done
// sees the pod as listed, then at each change the watch brings, so that
// the wait ends as the change arrives (a poll would end up to its period
// later, which start-up figures would carry). A pod not there yet, or
// deleted, is waited for. On timeout the error carries the pod's last
// status and events, which say why.
func (b *Bed) WaitPod(ctx context.Context, namespace, name string, timeout time.Duration, done func(*corev1.Pod) (bool, error)) (*corev1.Pod, error) {
	var last *corev1.Pod
	selector := fields.OneTermEqualSelector("metadata.name", name).String()
	pods := b.client.CoreV1().Pods(namespace)
	lw := &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			o.FieldSelector = selector
			return pods.List(ctx, o)
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			o.FieldSelector = selector
			return pods.Watch(ctx, o)
		},
	}
	wctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	_, err := watchtools.UntilWithSync(wctx, lw, &corev1.Pod{}, nil, func(e watch.Event) (bool, error) {
		p, ok := e.Object.(*corev1.Pod)
		if !ok || e.Type == watch.Deleted {
			return false, nil
		}
		last = p
		return done(p)
	})
	if err != nil {
		if wctx.Err() != nil && ctx.Err() == nil {
			err = fmt.Errorf("not done after %s: %w", timeout, err)
		}
		return last, fmt.Errorf("pod %s/%s: %w (%s)", namespace, name, err, b.describePod(ctx, namespace, name, last))
	}
	return last, nil
}

func (b *Bed) describePod(ctx context.Context, namespace, name string, p *corev1.Pod) string {
	var parts []string
	if p != nil {
		parts = append(parts, "phase "+string(p.Status.Phase))
		for _, cs := range p.Status.ContainerStatuses {
			if w := cs.State.Waiting; w != nil {
				parts = append(parts, fmt.Sprintf("container %s waiting: %s %s", cs.Name, w.Reason, w.Message))
			}
		}
	}
	events, err := b.client.CoreV1().Events(namespace).List(context.WithoutCancel(ctx), metav1.ListOptions{
		FieldSelector: "involvedObject.name=" + name,
	})
	if err == nil {
		for _, e := range events.Items {
			parts = append(parts, fmt.Sprintf("event %s: %s", e.Reason, e.Message))
		}
	}
	return strings.Join(parts, "; ")
}

// PodLogs returns the log of the pod's first container.
func (b *Bed) PodLogs(ctx context.Context, namespace, name string) (string, error) {
	data, err := b.client.CoreV1().Pods(namespace).GetLogs(name, &corev1.PodLogOptions{}).DoRaw(ctx)
	if err != nil {
		return "", fmt.Errorf("logs of pod %s/%s: %w", namespace, name, err)
	}
	return string(data), nil
}

// The lines that enclose the workload's env listing (test/images/workload).
const (
	envBegin = "-- environment\n"
	envEnd   = "-- end of environment\n"
)

// WaitPodLog polls the pod's log until it contains want, and returns it.
// A log with the workload's env listing begun is waited for until the
// listing's end too: the runtime may have logged only a part of it.
func (b *Bed) WaitPodLog(ctx context.Context, namespace, name, want string, timeout time.Duration) (string, error) {
	var logs string
	var lastErr error
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		logs, lastErr = b.PodLogs(ctx, namespace, name)
		if lastErr != nil || !strings.Contains(logs, want) {
			return false, nil
		}
		_, listing, begun := strings.Cut(logs, envBegin)
		return !begun || strings.Contains(listing, envEnd), nil
	})
	if err != nil {
		return logs, fmt.Errorf("pod %s/%s log never showed %q (last error: %w; log: %q)", namespace, name, want, lastErr, logs)
	}
	return logs, nil
}

// DeletePod deletes the pod and waits until it is gone.
func (b *Bed) DeletePod(ctx context.Context, namespace, name string) error {
	err := b.client.CoreV1().Pods(namespace).Delete(ctx, name, metav1.DeleteOptions{})
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("delete pod %s/%s: %w", namespace, name, err)
	}
	err = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 60*time.Second, true, func(ctx context.Context) (bool, error) {
		_, err := b.client.CoreV1().Pods(namespace).Get(ctx, name, metav1.GetOptions{})
		return apierrors.IsNotFound(err), nil
	})
	if err != nil {
		return fmt.Errorf("pod %s/%s not gone after delete: %w", namespace, name, err)
	}
	return nil
}

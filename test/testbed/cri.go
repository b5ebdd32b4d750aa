package testbed

import (
	"context"
	"fmt"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// RemoveSandbox removes a stopped pod sandbox through the runtime's CRI
// service, as the kubelet's garbage collection does (once a minute, for
// the sandboxes of deleted pods). Removing one already gone succeeds.
func (b *Bed) RemoveSandbox(ctx context.Context, id string) error {
	conn, err := b.criConn()
	if err != nil {
		return err
	}
	defer func() { _ = conn.Close() }()
	if _, err := runtimeapi.NewRuntimeServiceClient(conn).RemovePodSandbox(ctx, &runtimeapi.RemovePodSandboxRequest{PodSandboxId: id}); err != nil {
		return fmt.Errorf("remove pod sandbox %s: %w", id, err)
	}
	return nil
}

package testbed

import (
	"context"
	"fmt"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// RemoveSandbox removes a stopped pod sandbox through containerd's CRI
// service, as the kubelet's garbage collection does (once a minute, for
// the sandboxes of deleted pods). Removing one already gone succeeds.
func (b *Bed) RemoveSandbox(ctx context.Context, id string) error {
	conn, err := grpc.NewClient("unix://"+b.cfg.containerdSocket(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return fmt.Errorf("containerd's CRI socket %s: %w", b.cfg.containerdSocket(), err)
	}
	defer func() { _ = conn.Close() }()
	if _, err := runtimeapi.NewRuntimeServiceClient(conn).RemovePodSandbox(ctx, &runtimeapi.RemovePodSandboxRequest{PodSandboxId: id}); err != nil {
		return fmt.Errorf("remove pod sandbox %s: %w", id, err)
	}
	return nil
}

package netapi

import (
	"fmt"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

// Dial connects to a NetworkService on a unix socket (root's alone: no
// transport security on it). Close the connection when done.
func Dial(socket string) (NetworkServiceClient, *grpc.ClientConn, error) {
	conn, err := grpc.NewClient("unix://"+socket, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return nil, nil, fmt.Errorf("CRI Network API socket %s: %w", socket, err)
	}
	return NewNetworkServiceClient(conn), conn, nil
}

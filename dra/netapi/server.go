package netapi

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path"
	"path/filepath"
	"strconv"
	"strings"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"k8s.io/klog/v2"

	"github.com/fastpath-dra/fastpath/dataplane/hostdir"
)

// Server serves NetworkService on a unix socket.
type Server struct {
	socket string
	info   os.FileInfo // the socket this server made
	grpc   *grpc.Server
	errs   chan error
}

// service is NetworkService over a Registry.
type service struct {
	UnimplementedNetworkServiceServer
	reg *Registry
}

var _ NetworkServiceServer = (*service)(nil)

// Serve serves reg's networks on socket until Stop: the socket is made
// root's alone (0600, in a directory made 0700 if it is not there), one
// left by an earlier daemon replaced. Calls are logged with ctx's logger.
// A failure of the server after it started arrives on Err.
func Serve(ctx context.Context, socket string, reg *Registry) (*Server, error) {
	if err := hostdir.Make(filepath.Dir(socket), 0o700); err != nil {
		return nil, fmt.Errorf("CRI Network API socket: %w", err)
	}
	if err := os.Remove(socket); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("CRI Network API socket: %w", err)
	}
	l, err := (&net.ListenConfig{}).Listen(ctx, "unix", socket)
	if err != nil {
		return nil, fmt.Errorf("CRI Network API socket: %w", err)
	}
	// Another daemon of the node (a rolling update) may take the path
	// over: this one removes only the socket it made (Stop).
	l.(*net.UnixListener).SetUnlinkOnClose(false)
	info, err := os.Stat(socket)
	if err == nil {
		err = os.Chmod(socket, 0o600)
	}
	if err != nil {
		_ = l.Close()
		_ = os.Remove(socket)
		return nil, fmt.Errorf("CRI Network API socket: %w", err)
	}
	logger := klog.FromContext(ctx)
	s := &Server{socket: socket, info: info, errs: make(chan error, 1),
		grpc: grpc.NewServer(grpc.ChainUnaryInterceptor(logCalls(logger), strictRequests))}
	RegisterNetworkServiceServer(s.grpc, &service{reg: reg})
	go func() {
		if err := s.grpc.Serve(l); err != nil {
			s.errs <- fmt.Errorf("CRI Network API on %s: %w", socket, err)
		}
		close(s.errs)
	}()
	logger.Info("Serving the CRI Network API", "socket", socket)
	return s, nil
}

// Err delivers a failure of the server, and is closed once it stopped.
func (s *Server) Err() <-chan error { return s.errs }

// Stop ends the calls in progress and removes the socket, unless another
// daemon replaced it.
func (s *Server) Stop() {
	s.grpc.GracefulStop()
	if fi, err := os.Stat(s.socket); err == nil && os.SameFile(fi, s.info) {
		_ = os.Remove(s.socket)
	}
}

// logCalls gives each call ctx's logger with the method, and logs failed
// calls.
func logCalls(logger klog.Logger) grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		l := logger.WithValues("method", info.FullMethod)
		resp, err := handler(klog.NewContext(ctx, l), req)
		if err != nil {
			l.V(2).Info("CRI Network API call failed", "err", err)
		}
		return resp, err
	}
}

// strictRequests refuses, with InvalidArgument, a request holding fields
// its message does not have (at any depth): a client that wrote another
// shape of a request (the proposal names RemovePodNetworkRequest without
// its fields; this service's is {string name = 1}) is told so, not
// answered OK for something it did not ask.
func strictRequests(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	if m, ok := req.(proto.Message); ok {
		if unknown := unknownFields(m.ProtoReflect(), ""); len(unknown) > 0 {
			return nil, status.Errorf(codes.InvalidArgument, "%s: field %s: not a field of %s (see netapi.proto)",
				path.Base(info.FullMethod), strings.Join(unknown, ", "), m.ProtoReflect().Descriptor().FullName())
		}
	}
	return handler(ctx, req)
}

// unknownFields lists the field numbers m and the messages in it hold
// that their types do not have, each with its path (config.metadata.7).
func unknownFields(m protoreflect.Message, at string) []string {
	var out []string
	for b := m.GetUnknown(); len(b) > 0; {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return append(out, at+"?")
		}
		out = append(out, at+strconv.Itoa(int(num)))
		b = b[n:]
		if n = protowire.ConsumeFieldValue(num, typ, b); n < 0 {
			return out
		}
		b = b[n:]
	}
	m.Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		name := at + string(fd.Name())
		switch {
		case fd.IsList() && fd.Message() != nil:
			for i := range v.List().Len() {
				out = append(out, unknownFields(v.List().Get(i).Message(), fmt.Sprintf("%s[%d].", name, i))...)
			}
		case fd.IsMap() && fd.MapValue().Message() != nil:
			v.Map().Range(func(k protoreflect.MapKey, mv protoreflect.Value) bool {
				out = append(out, unknownFields(mv.Message(), fmt.Sprintf("%s[%q].", name, k.String()))...)
				return true
			})
		case !fd.IsList() && !fd.IsMap() && fd.Message() != nil:
			out = append(out, unknownFields(v.Message(), name+".")...)
		}
		return true
	})
	return out
}

func (s *service) SetPodNetwork(ctx context.Context, req *SetPodNetworkRequest) (*SetPodNetworkResponse, error) {
	st, err := s.reg.Set(ctx, req.GetConfig())
	if err != nil {
		return nil, grpcError(err)
	}
	return &SetPodNetworkResponse{Status: st}, nil
}

func (s *service) RemovePodNetwork(ctx context.Context, req *RemovePodNetworkRequest) (*RemovePodNetworkResponse, error) {
	if err := s.reg.Remove(ctx, req.GetName()); err != nil {
		return nil, grpcError(err)
	}
	return &RemovePodNetworkResponse{}, nil
}

func (s *service) ListPodNetwork(ctx context.Context, _ *ListPodNetworkRequest) (*ListPodNetworkResponse, error) {
	return &ListPodNetworkResponse{Networks: s.reg.List(ctx)}, nil
}

// grpcError gives a registry's error its gRPC code: InvalidArgument for
// input naming the field, PermissionDenied for a reserved network,
// Internal for the rest (the node failed to keep the network).
func grpcError(err error) error {
	var fe *FieldError
	switch {
	case errors.As(err, &fe):
		return status.Error(codes.InvalidArgument, err.Error())
	case errors.Is(err, ErrReserved):
		return status.Error(codes.PermissionDenied, err.Error())
	case errors.Is(err, ErrNotFound):
		return status.Error(codes.NotFound, err.Error())
	}
	return status.Error(codes.Internal, err.Error())
}

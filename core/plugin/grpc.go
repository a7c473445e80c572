package plugin

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	goplugin "github.com/hashicorp/go-plugin"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/k3-inference/k3/core/plugin/internal/pb"
	"github.com/k3-inference/k3/core/plugin/internal/wire"
)

// wireErr turns a gRPC error into a plain one: the plugin's own message, or
// wire.ErrUnavailable for transport failures.
func wireErr(ctx context.Context, op string, err error) error {
	if err == nil {
		return nil
	}
	if ctxErr := ctx.Err(); ctxErr != nil {
		return fmt.Errorf("%s: %w", op, ctxErr)
	}
	st, ok := status.FromError(err)
	if !ok {
		return fmt.Errorf("%s: %w", op, err)
	}
	switch st.Code() {
	case codes.Unavailable, codes.Canceled:
		return fmt.Errorf("%s: %w: %s", op, wire.ErrUnavailable, st.Message())
	case codes.DeadlineExceeded:
		return fmt.Errorf("%s: %w", op, context.DeadlineExceeded)
	}
	return fmt.Errorf("%s: %s", op, st.Message())
}

// stagerPlugin binds a Stager to go-plugin's gRPC transport. On the plugin
// side impl is set; on the host side it is nil and GRPCClient is used.
type stagerPlugin struct {
	goplugin.NetRPCUnsupportedPlugin
	impl Stager
}

func (p *stagerPlugin) GRPCServer(_ *goplugin.GRPCBroker, s *grpc.Server) error {
	pb.RegisterStagerServer(s, &stagerServer{impl: p.impl})
	return nil
}

func (p *stagerPlugin) GRPCClient(_ context.Context, _ *goplugin.GRPCBroker, c *grpc.ClientConn) (any, error) {
	return &stagerClient{c: pb.NewStagerClient(c)}, nil
}

type stagerServer struct {
	pb.UnimplementedStagerServer
	impl Stager
}

func (s *stagerServer) Describe(ctx context.Context, _ *pb.Empty) (*pb.StagerInfo, error) {
	info, err := s.impl.Describe(ctx)
	if err != nil {
		return nil, err
	}
	return toprotoStagerInfo(info), nil
}

func (s *stagerServer) Open(ctx context.Context, r *pb.OpenRequest) (*pb.OpenResponse, error) {
	req := fromprotoOpenRequest(r)
	noteShmDir(req.ShmDir) // removed with the plugin's files if the host dies
	resp, err := s.impl.Open(ctx, req)
	if err != nil {
		return nil, err
	}
	return toprotoOpenResponse(resp), nil
}

func (s *stagerServer) Hint(ctx context.Context, r *pb.HintRequest) (*pb.Empty, error) {
	return &pb.Empty{}, s.impl.Hint(ctx, fromprotoHintRequest(r))
}

func (s *stagerServer) Acquire(ctx context.Context, r *pb.AcquireRequest) (*pb.AcquireResponse, error) {
	for _, step := range r.GetRelease() {
		if err := s.impl.Release(ctx, &ReleaseRequest{Step: step}); err != nil {
			return nil, err
		}
	}
	req, err := fromprotoAcquireRequest(r)
	if err != nil {
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}
	resp, err := s.impl.Acquire(ctx, req)
	if err != nil {
		return nil, err
	}
	return toprotoAcquireResponse(resp), nil
}

func (s *stagerServer) Release(ctx context.Context, r *pb.ReleaseRequest) (*pb.Empty, error) {
	return &pb.Empty{}, s.impl.Release(ctx, &ReleaseRequest{Step: r.GetStep()})
}

func (s *stagerServer) Stats(ctx context.Context, _ *pb.Empty) (*pb.StatsResponse, error) {
	st, err := s.impl.Stats(ctx)
	if err != nil {
		return nil, err
	}
	return toprotoStats(st), nil
}

func (s *stagerServer) Close(ctx context.Context, _ *pb.Empty) (*pb.Empty, error) {
	return &pb.Empty{}, s.impl.Close(ctx)
}

// stagerClient is the host's view of a Stager in another process.
// Release is deferred: the steps ride along with the next Acquire (or go
// out on their own before Stats and Close), so a decode layer costs one
// round trip fewer. A release that waits is harmless, since the stager
// applies it before pinning anything new.
type stagerClient struct {
	c pb.StagerClient

	mu      sync.Mutex
	release []uint64
}

func (c *stagerClient) takeReleases() []uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	r := c.release
	c.release = nil
	return r
}

// flush sends deferred releases on their own.
func (c *stagerClient) flush(ctx context.Context) error {
	for _, step := range c.takeReleases() {
		if _, err := c.c.Release(ctx, &pb.ReleaseRequest{Step: step}); err != nil {
			return wireErr(ctx, "release", err)
		}
	}
	return nil
}

func (c *stagerClient) Describe(ctx context.Context) (*StagerInfo, error) {
	info, err := c.c.Describe(ctx, &pb.Empty{})
	if err != nil {
		return nil, wireErr(ctx, "describe", err)
	}
	return fromprotoStagerInfo(info), nil
}

func (c *stagerClient) Open(ctx context.Context, r *OpenRequest) (*OpenResponse, error) {
	resp, err := c.c.Open(ctx, toprotoOpenRequest(r))
	if err != nil {
		return nil, wireErr(ctx, "open", err)
	}
	return fromprotoOpenResponse(resp), nil
}

func (c *stagerClient) Hint(ctx context.Context, r *HintRequest) error {
	_, err := c.c.Hint(ctx, toprotoHintRequest(r))
	return wireErr(ctx, "hint", err)
}

func (c *stagerClient) Acquire(ctx context.Context, r *AcquireRequest) (*AcquireResponse, error) {
	p := toprotoAcquireRequest(r)
	p.Release = c.takeReleases()
	resp, err := c.c.Acquire(ctx, p)
	if err != nil {
		return nil, wireErr(ctx, "acquire", err)
	}
	return fromprotoAcquireResponse(resp)
}

func (c *stagerClient) Release(_ context.Context, r *ReleaseRequest) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.release = append(c.release, r.Step)
	return nil
}

func (c *stagerClient) Stats(ctx context.Context) (*Stats, error) {
	if err := c.flush(ctx); err != nil {
		return nil, err
	}
	st, err := c.c.Stats(ctx, &pb.Empty{})
	if err != nil {
		return nil, wireErr(ctx, "stats", err)
	}
	return fromprotoStats(st), nil
}

func (c *stagerClient) Close(ctx context.Context) error {
	c.takeReleases() // closing drops every pin anyway
	_, err := c.c.Close(ctx, &pb.Empty{})
	return wireErr(ctx, "close", err)
}

// kernelsPlugin binds a Kernels implementation to go-plugin's gRPC transport.
type kernelsPlugin struct {
	goplugin.NetRPCUnsupportedPlugin
	impl Kernels
}

func (p *kernelsPlugin) GRPCServer(_ *goplugin.GRPCBroker, s *grpc.Server) error {
	pb.RegisterKernelsServer(s, &kernelsServer{impl: p.impl})
	return nil
}

func (p *kernelsPlugin) GRPCClient(_ context.Context, _ *goplugin.GRPCBroker, c *grpc.ClientConn) (any, error) {
	return &kernelsClient{c: pb.NewKernelsClient(c)}, nil
}

type kernelsServer struct {
	pb.UnimplementedKernelsServer
	impl Kernels
}

func (s *kernelsServer) Describe(ctx context.Context, _ *pb.Empty) (*pb.KernelsInfo, error) {
	info, err := s.impl.Describe(ctx)
	if err != nil {
		return nil, err
	}
	return toprotoKernelsInfo(info), nil
}

func (s *kernelsServer) Execute(ctx context.Context, r *pb.ExecuteRequest) (*pb.ExecuteResponse, error) {
	resp, err := s.impl.Execute(ctx, fromprotoExecuteRequest(r))
	if err != nil {
		return nil, err
	}
	return &pb.ExecuteResponse{ElapsedNanos: int64(resp.Elapsed)}, nil
}

// kernelsClient is the host's view of Kernels in another process. With a
// doorbell, Execute goes through shared memory when it can (see
// doorbell.go) and over gRPC otherwise.
type kernelsClient struct {
	c  pb.KernelsClient
	db *doorbellClient
}

func (c *kernelsClient) Describe(ctx context.Context) (*KernelsInfo, error) {
	info, err := c.c.Describe(ctx, &pb.Empty{})
	if err != nil {
		return nil, wireErr(ctx, "describe", err)
	}
	return fromprotoKernelsInfo(info), nil
}

func (c *kernelsClient) Execute(ctx context.Context, r *ExecuteRequest) (*ExecuteResponse, error) {
	// A cancellable context stays on gRPC, which carries the cancellation
	// to the plugin.
	if c.db != nil && ctx.Done() == nil {
		if resp, err, ok := c.db.execute(r); ok {
			if err != nil {
				if errors.Is(err, wire.ErrUnavailable) {
					return nil, fmt.Errorf("execute: %w", err)
				}
				return nil, wireErr(ctx, "execute", err)
			}
			return resp, nil
		}
	}
	resp, err := c.c.Execute(ctx, toprotoExecuteRequest(r))
	if err != nil {
		return nil, wireErr(ctx, "execute", err)
	}
	return &ExecuteResponse{Elapsed: time.Duration(resp.GetElapsedNanos())}, nil
}

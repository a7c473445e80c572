package plugin

import (
	"context"
	"errors"
	"log/slog"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/k3-inference/k3/core/plugin/internal/pb"
	"github.com/k3-inference/k3/core/plugin/internal/wire"
)

// loopback is a KernelsClient that calls a kernelsServer in this process,
// counting the Executes that took the gRPC path.
type loopback struct {
	s    *kernelsServer
	grpc atomic.Int64
}

func (l *loopback) Describe(ctx context.Context, in *pb.Empty, _ ...grpc.CallOption) (*pb.KernelsInfo, error) {
	return l.s.Describe(ctx, in)
}

func (l *loopback) Execute(ctx context.Context, in *pb.ExecuteRequest, _ ...grpc.CallOption) (*pb.ExecuteResponse, error) {
	l.grpc.Add(1)
	resp, err := l.s.Execute(ctx, in)
	if err != nil {
		// As grpc-go's server turns a handler's error into a status.
		st, ok := status.FromError(err)
		if !ok {
			st = status.FromContextError(err)
		}
		return nil, st.Err()
	}
	return resp, nil
}

func (l *loopback) OpenDoorbell(ctx context.Context, in *pb.DoorbellRequest, _ ...grpc.CallOption) (*pb.DoorbellResponse, error) {
	return l.s.OpenDoorbell(ctx, in)
}

// scripted answers each request by its first op's name.
type scripted struct{ calls atomic.Int64 }

func (*scripted) Describe(context.Context) (*KernelsInfo, error) { return &KernelsInfo{}, nil }

func (s *scripted) Execute(_ context.Context, r *ExecuteRequest) (*ExecuteResponse, error) {
	s.calls.Add(1)
	if len(r.Ops) == 0 {
		return &ExecuteResponse{Elapsed: 42}, nil
	}
	switch r.Ops[0].Name {
	case "plain":
		return nil, errors.New("plain failure")
	case "notfound":
		return nil, status.Error(codes.NotFound, "no such thing")
	case "canceled":
		return nil, context.Canceled
	}
	return &ExecuteResponse{Elapsed: 7}, nil
}

// TestDoorbellProtocol drives both ends of the doorbell in one process: the
// calls that must stay on gRPC do, errors come out as gRPC's would, a
// plugin that never answers is given up once its process is gone, and
// closing stops the plugin's goroutine.
func TestDoorbellProtocol(t *testing.T) {
	ctx := context.Background()
	before := runtime.NumGoroutine()
	impl := &scripted{}
	lb := &loopback{s: &kernelsServer{impl: impl}}
	var dead atomic.Bool
	db := openDoorbell(ctx, lb, dead.Load, slog.New(slog.DiscardHandler))
	if db == nil {
		t.Fatal("no doorbell")
	}
	k := &kernelsClient{c: lb, db: db}

	resp, err := k.Execute(ctx, &ExecuteRequest{})
	if err != nil || resp.Elapsed != 42 || lb.grpc.Load() != 0 {
		t.Fatalf("empty batch: %v %v, %d over gRPC", resp, err, lb.grpc.Load())
	}
	// Each error as the gRPC path reports it.
	for _, name := range []string{"plain", "notfound", "canceled"} {
		req := &ExecuteRequest{Ops: []Op{{Name: name}}}
		_, viaBell := k.Execute(ctx, req)
		_, viaGRPC := (&kernelsClient{c: lb}).Execute(ctx, req)
		if viaBell == nil || viaGRPC == nil || viaBell.Error() != viaGRPC.Error() || errors.Is(viaBell, wire.ErrUnavailable) != errors.Is(viaGRPC, wire.ErrUnavailable) {
			t.Errorf("%s: doorbell %v, gRPC %v", name, viaBell, viaGRPC)
		}
	}
	lb.grpc.Store(0)
	// A cancellable context, and a request larger than the file, go over
	// gRPC.
	cctx, cancel := context.WithCancel(ctx)
	defer cancel()
	if _, err := k.Execute(cctx, &ExecuteRequest{}); err != nil || lb.grpc.Load() != 1 {
		t.Errorf("cancellable context: %v, %d over gRPC", err, lb.grpc.Load())
	}
	big := &ExecuteRequest{Regions: []Region{{Path: strings.Repeat("x", dbReqCap)}}}
	if _, err := k.Execute(ctx, big); err != nil || lb.grpc.Load() != 2 {
		t.Errorf("oversized request: %v, %d over gRPC", err, lb.grpc.Load())
	}
	// Still in step after the fallbacks.
	if resp, err := k.Execute(ctx, &ExecuteRequest{Ops: []Op{{Name: "ok"}}}); err != nil || resp.Elapsed != 7 || lb.grpc.Load() != 2 {
		t.Errorf("after fallbacks: %v %v, %d over gRPC", resp, err, lb.grpc.Load())
	}

	db.close()
	if _, err := k.Execute(ctx, &ExecuteRequest{}); err != nil || lb.grpc.Load() != 3 {
		t.Errorf("after close: %v, %d over gRPC", err, lb.grpc.Load())
	}
	for start := time.Now(); runtime.NumGoroutine() > before; time.Sleep(time.Millisecond) {
		if time.Since(start) > 5*time.Second {
			t.Fatalf("%d goroutines after close, %d before open", runtime.NumGoroutine(), before)
		}
	}

	// A plugin that took the doorbell and died: nobody answers, and once
	// its process has exited the call fails as unavailable and the client
	// stays on gRPC.
	mute := &loopback{s: &kernelsServer{impl: impl}}
	db = openDoorbell(ctx, &muteOpen{mute}, dead.Load, slog.New(slog.DiscardHandler))
	if db == nil {
		t.Fatal("no doorbell")
	}
	defer db.close()
	time.AfterFunc(20*time.Millisecond, func() { dead.Store(true) })
	k = &kernelsClient{c: mute, db: db}
	if _, err := k.Execute(ctx, &ExecuteRequest{}); !errors.Is(err, wire.ErrUnavailable) {
		t.Errorf("unanswered doorbell: %v", err)
	}
	if _, err := k.Execute(ctx, &ExecuteRequest{}); err != nil || mute.grpc.Load() != 1 {
		t.Errorf("after the death: %v, %d over gRPC", err, mute.grpc.Load())
	}
}

// muteOpen accepts the doorbell without serving it.
type muteOpen struct{ *loopback }

func (*muteOpen) OpenDoorbell(context.Context, *pb.DoorbellRequest, ...grpc.CallOption) (*pb.DoorbellResponse, error) {
	return &pb.DoorbellResponse{}, nil
}

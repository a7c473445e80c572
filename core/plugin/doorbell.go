package plugin

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/k3-inference/k3/core/plugin/internal/pb"
	"github.com/k3-inference/k3/core/plugin/internal/wire"
)

// The doorbell is a shared-memory channel for Execute. A gRPC round trip
// costs 100 to 300 µs on a busy machine, and a decode token of a large
// MoE model makes hundreds of batches; through the doorbell a batch costs a
// µs or two of encoding plus, at worst, one futex wake-up each way.
//
// The host creates a small file in ShmDir, offers it with the OpenDoorbell
// RPC and removes it once the plugin has mapped it. To execute, the host
// writes the request into the file (see doorbell_codec.go) and bumps
// reqSeq; the plugin's doorbell goroutine runs it, writes the status (the
// gRPC code and message the same error would have had) and bumps respSeq.
// Each side may spin on the other's sequence word (K3_PLUGIN_DOORBELL_SPIN),
// then sleeps on it with a futex after raising its wait flag, which tells
// the other side to wake it.
//
// Everything else stays on gRPC: Describe, a request that does not fit, a
// call with a cancellable context (the plugin cannot see the host's
// context through shared memory), a call made while another holds the
// doorbell, and every call to a plugin that does not answer OpenDoorbell.
// A plugin that dies mid-request is noticed by its process exiting, which
// the waiting host checks every doorbellPoll, and fails the call with
// wire.ErrUnavailable just as the broken gRPC connection would.

// wire.DoorbellEnv set to "off" in the host's environment keeps every
// Execute on gRPC; in a plugin's, it refuses the doorbell as an older
// plugin does.

// doorbellLayout versions the file's layout. A plugin that does not know
// the host's layout refuses the doorbell and is driven over gRPC.
const doorbellLayout = 1

// The file's layout: each word the two sides write on its own cache line.
const (
	dbMagic       = "k3bell01"
	dbReqSeq      = 64  // uint32, bumped by the host per request
	dbPlugWait    = 128 // uint32, 1 while the plugin sleeps on reqSeq
	dbRespSeq     = 192 // uint32, set to reqSeq by the plugin when done
	dbHostWait    = 256 // uint32, 1 while the host sleeps on respSeq
	dbClosed      = 320 // uint32, 1 once the host is done with the doorbell
	dbReqLen      = 384 // uint32
	dbRespCode    = 448 // uint32, a gRPC code
	dbRespMsgLen  = 452 // uint32
	dbRespElapsed = 456 // int64 nanoseconds
	dbReqOff      = 4096
	dbReqCap      = 1 << 20
	dbMsgOff      = dbReqOff + dbReqCap
	dbMsgCap      = 64 << 10
	dbSize        = dbMsgOff + dbMsgCap
)

// doorbellPoll bounds how long a sleeping host goes without checking that
// the plugin process is still there.
const doorbellPoll = 5 * time.Millisecond

// The spins before sleeping, none by default: on a busy 2-core machine
// a spinning side takes the CPU from the other side or from the kernels'
// threads, and an empty round trip measured 7-15 µs with no spin, 20-40
// with 3-20 µs of spin and 50-150 with more. A dedicated machine may do
// better with a little.
var hostSpin, plugSpin = doorbellSpins()

// doorbellSpins reads K3_PLUGIN_DOORBELL_SPIN="HOST,PLUGIN" in µs.
func doorbellSpins() (time.Duration, time.Duration) {
	var h, p time.Duration
	if hs, ps, ok := strings.Cut(os.Getenv("K3_PLUGIN_DOORBELL_SPIN"), ","); ok {
		if v, err := strconv.Atoi(hs); err == nil {
			h = time.Duration(v) * time.Microsecond
		}
		if v, err := strconv.Atoi(ps); err == nil {
			p = time.Duration(v) * time.Microsecond
		}
	}
	return h, p
}

func doorbellOff() bool { return os.Getenv(wire.DoorbellEnv) == "off" }

type doorbellMem []byte

func (m doorbellMem) word(off int) *uint32 { return (*uint32)(unsafe.Pointer(&m[off])) }

// spinUntil spins up to d for *w to differ from old, and reports whether it
// did.
func spinUntil(w *uint32, old uint32, d time.Duration) bool {
	if d <= 0 {
		return atomic.LoadUint32(w) != old
	}
	start := time.Now()
	for i := 0; ; i++ {
		if atomic.LoadUint32(w) != old {
			return true
		}
		if i%64 == 63 && time.Since(start) > d {
			return false
		}
	}
}

// doorbellClient is the host's end.
type doorbellClient struct {
	exited func() bool

	mu     sync.Mutex
	mem    doorbellMem
	seq    uint32
	broken bool // the plugin died; every call goes to gRPC, which fails too
}

// openDoorbell offers a doorbell to the plugin behind c and returns it, or
// nil if the plugin does not take it (an older SDK, wire.DoorbellEnv, no futex
// on this OS) or it could not be set up; the caller then stays on gRPC.
func openDoorbell(ctx context.Context, c pb.KernelsClient, exited func() bool, log *slog.Logger) *doorbellClient {
	if !haveFutex || doorbellOff() {
		return nil
	}
	f, err := os.CreateTemp(wire.ShmDir(), wire.ShmPattern("doorbell"))
	if err != nil {
		log.Debug("kernels doorbell: staying on gRPC", "err", err)
		return nil
	}
	defer os.Remove(f.Name())
	defer f.Close()
	if err := f.Truncate(dbSize); err != nil {
		log.Debug("kernels doorbell: staying on gRPC", "err", err)
		return nil
	}
	mem, err := unix.Mmap(int(f.Fd()), 0, dbSize, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		log.Debug("kernels doorbell: staying on gRPC", "err", err)
		return nil
	}
	copy(mem, dbMagic)
	if _, err := c.OpenDoorbell(ctx, &pb.DoorbellRequest{Path: f.Name(), Layout: doorbellLayout}); err != nil {
		unix.Munmap(mem)
		if status.Code(err) != codes.Unimplemented {
			log.Warn("kernels doorbell: plugin could not open it; staying on gRPC", "err", err)
		}
		return nil
	}
	return &doorbellClient{exited: exited, mem: mem}
}

// execute runs r through the doorbell; ok is false when the caller must
// use gRPC instead.
func (d *doorbellClient) execute(r *ExecuteRequest) (resp *ExecuteResponse, err error, ok bool) {
	if !d.mu.TryLock() {
		return nil, nil, false // another call has it; gRPC runs concurrently
	}
	defer d.mu.Unlock()
	if d.mem == nil || d.broken {
		return nil, nil, false
	}
	b, fits := appendExecute(d.mem[dbReqOff:dbReqOff:dbMsgOff], r)
	if !fits || len(b) > dbReqCap || len(b) > 0 && &b[0] != &d.mem[dbReqOff] {
		return nil, nil, false // too large for the file, or not UTF-8: gRPC says what it says
	}
	d.seq++
	seq := d.seq
	atomic.StoreUint32(d.mem.word(dbReqLen), uint32(len(b)))
	atomic.StoreUint32(d.mem.word(dbReqSeq), seq)
	if atomic.LoadUint32(d.mem.word(dbPlugWait)) != 0 {
		futexWake(d.mem.word(dbReqSeq))
	}
	if !d.await(seq) {
		d.broken = true
		return nil, fmt.Errorf("%w: plugin process exited during the request", wire.ErrUnavailable), true
	}
	code := codes.Code(atomic.LoadUint32(d.mem.word(dbRespCode)))
	if code != codes.OK {
		n := min(int(atomic.LoadUint32(d.mem.word(dbRespMsgLen))), dbMsgCap)
		return nil, status.Error(code, string(d.mem[dbMsgOff:dbMsgOff+n])), true
	}
	elapsed := atomic.LoadInt64((*int64)(unsafe.Pointer(&d.mem[dbRespElapsed])))
	return &ExecuteResponse{Elapsed: time.Duration(elapsed)}, nil, true
}

// await waits for the plugin to answer request seq, and reports false if
// its process exited first.
func (d *doorbellClient) await(seq uint32) bool {
	resp, wait := d.mem.word(dbRespSeq), d.mem.word(dbHostWait)
	if spinUntil(resp, seq-1, hostSpin) {
		return true
	}
	for {
		atomic.StoreUint32(wait, 1)
		if atomic.LoadUint32(resp) == seq {
			atomic.StoreUint32(wait, 0)
			return true
		}
		futexWait(resp, seq-1, doorbellPoll)
		atomic.StoreUint32(wait, 0)
		if atomic.LoadUint32(resp) == seq {
			return true
		}
		if d.exited() {
			// It may have answered just before it died.
			return atomic.LoadUint32(resp) == seq
		}
	}
}

// close tells the plugin's goroutine to stop and unmaps the doorbell, after
// a call in flight has returned.
func (d *doorbellClient) close() {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.mem == nil {
		return
	}
	atomic.StoreUint32(d.mem.word(dbClosed), 1)
	futexWake(d.mem.word(dbReqSeq))
	unix.Munmap(d.mem)
	d.mem = nil
}

// OpenDoorbell is the plugin's end of the RPC: it maps the host's file and
// serves it until the host closes it.
func (s *kernelsServer) OpenDoorbell(_ context.Context, r *pb.DoorbellRequest) (*pb.DoorbellResponse, error) {
	if !haveFutex || doorbellOff() || r.GetLayout() != doorbellLayout {
		return nil, status.Errorf(codes.Unimplemented, "doorbell layout %d not offered", r.GetLayout())
	}
	f, err := os.OpenFile(r.GetPath(), os.O_RDWR, 0)
	if err != nil {
		return nil, fmt.Errorf("doorbell: %w", err)
	}
	defer f.Close()
	if st, err := f.Stat(); err != nil || st.Size() != dbSize {
		return nil, fmt.Errorf("doorbell: %s is not a doorbell of %d bytes", r.GetPath(), dbSize)
	}
	mem, err := unix.Mmap(int(f.Fd()), 0, dbSize, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return nil, fmt.Errorf("doorbell: mmap %s: %w", r.GetPath(), err)
	}
	if string(mem[:len(dbMagic)]) != dbMagic {
		unix.Munmap(mem)
		return nil, errors.New("doorbell: bad magic")
	}
	go serveDoorbell(mem, s.impl)
	return &pb.DoorbellResponse{}, nil
}

// serveDoorbell runs the host's requests one at a time, as gRPC would run
// them, until the host closes the doorbell.
func serveDoorbell(mem doorbellMem, impl Kernels) {
	defer unix.Munmap(mem)
	reqSeq, wait := mem.word(dbReqSeq), mem.word(dbPlugWait)
	// The last request answered, not the last posted: the host may post
	// its first before this goroutine starts.
	last := atomic.LoadUint32(mem.word(dbRespSeq))
	var dec execDecoder
	for {
		if !spinUntil(reqSeq, last, plugSpin) {
			for atomic.LoadUint32(reqSeq) == last {
				atomic.StoreUint32(wait, 1)
				if atomic.LoadUint32(reqSeq) == last && atomic.LoadUint32(mem.word(dbClosed)) == 0 {
					futexWait(reqSeq, last, time.Second)
				}
				atomic.StoreUint32(wait, 0)
				if atomic.LoadUint32(mem.word(dbClosed)) != 0 {
					return
				}
			}
		}
		if atomic.LoadUint32(mem.word(dbClosed)) != 0 {
			return
		}
		last = atomic.LoadUint32(reqSeq)
		code, msg, elapsed := runDoorbell(mem, impl, &dec)
		n := copy(mem[dbMsgOff:dbMsgOff+dbMsgCap], msg)
		atomic.StoreUint32(mem.word(dbRespCode), uint32(code))
		atomic.StoreUint32(mem.word(dbRespMsgLen), uint32(n))
		atomic.StoreInt64((*int64)(unsafe.Pointer(&mem[dbRespElapsed])), int64(elapsed))
		atomic.StoreUint32(mem.word(dbRespSeq), last)
		if atomic.LoadUint32(mem.word(dbHostWait)) != 0 {
			futexWake(mem.word(dbRespSeq))
		}
	}
}

// runDoorbell decodes and runs one request and returns the status gRPC's
// server would have sent for it.
func runDoorbell(mem doorbellMem, impl Kernels, dec *execDecoder) (codes.Code, string, time.Duration) {
	n := int(atomic.LoadUint32(mem.word(dbReqLen)))
	if n > dbReqCap {
		return codes.Internal, fmt.Sprintf("doorbell: request of %d bytes", n), 0
	}
	req, err := dec.decode(mem[dbReqOff : dbReqOff+n])
	if err != nil {
		return codes.Internal, err.Error(), 0
	}
	resp, err := impl.Execute(context.Background(), req)
	if err != nil {
		st, ok := status.FromError(err)
		if !ok {
			st = status.FromContextError(err)
		}
		return st.Code(), st.Message(), 0
	}
	if resp == nil {
		return codes.OK, "", 0
	}
	return codes.OK, "", resp.Elapsed
}

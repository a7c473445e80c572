// Package parallel runs loops over rows on the calling goroutine and a
// process-wide set of persistent workers. A decode step makes tens to
// hundreds of parallel loops of a few hundred microseconds each, so starting
// goroutines per loop and splitting rows into fixed equal ranges both cost
// time: the first pays a goroutine start and a wake-up per loop, the second
// stalls the loop whenever one thread is descheduled. Here workers are started
// once and park when idle, and every participant takes chunks from a shared
// atomic counter, so a thread that runs late simply takes fewer of them.
//
// One set of workers serves every caller (core/ops' pools and the kernel
// plugins' row loops alike), so a process has about one worker per core
// it uses, not one per pool.
package parallel

import (
	"os"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

// cacheLine pads what one thread writes away from what others read.
const cacheLine = 64

// maxWorkers bounds the helpers one process starts, whatever threads ask.
const maxWorkers = 256

// Workers spin only where loops come back to back. A worker with nothing
// to do parks, and a parked worker takes a futex wake-up to start — tens of
// microseconds on a VM, a good share of a loop of a few hundred. So a
// worker whose last job was handed over within spinWindow of it going idle
// polls for that long before parking, yielding its thread to other
// goroutines between polls (runtime.Gosched: a tight loop would take the
// SMT sibling's execution units from the thread doing the work). A worker
// whose jobs come further apart parks at once, as before. Measured on a
// 2-vCPU Zen 4 VM, 4 alternated rounds of back-to-back 4096x4096 MatVecs at
// 2 threads: Q2_K 20-24 -> 28-29 GB/s, Q6_K 41-48 -> 49-58, Q8_0 45-67 ->
// 69-74, Q4_0 35-39 -> 43-47, F16 (float fast) 46-53 -> 52-62; `k3 bench
// -t 2` q2_k decode 17.1 -> 17.5 tok/s (5 alternations; within its noise). A tight spin
// (no yield) or one after every job made the memory-bound F16 runs slower.
// The caller, done with its ranges, polls the same way (at most
// spinWindow) for the helpers still on their last ones before it blocks:
// blocked, it took a futex wake-up each loop to resume. Measured like the
// above, 2 alternated rounds: Q2_K 4096x4096 28-30 -> 31.5 GB/s, Q8_0 78-80
// -> 86-88, Q4_K 2048x7168 and 7168x2048 (an expert's) 41-44 -> 45-46;
// Q6_K and F16 unchanged; `k3 bench -t 2` decode within its noise. The
// caller does not wait for helpers that have not started (finish).
//
// SpinEnv (microseconds, 0 to turn it off) overrides spinWindow.
const SpinEnv = "K3_PARALLEL_SPIN_US"

// spinWindow is how long a worker whose jobs come back to back polls.
var spinWindow = func() int64 {
	if v, err := strconv.Atoi(os.Getenv(SpinEnv)); err == nil && v >= 0 {
		return int64(v) * int64(time.Microsecond)
	}
	return int64(100 * time.Microsecond)
}()

// epoch anchors nanotime.
var epoch = time.Now()

// nanotime is a monotonic clock in nanoseconds.
func nanotime() int64 { return int64(time.Since(epoch)) }

// For calls fn on disjoint ranges [lo, hi) covering [0, n), every range
// chunk long (the last may be shorter) and starting at a multiple of chunk,
// on the calling goroutine and up to threads-1 idle workers, and returns
// when all calls have. Ranges are handed out in order from a shared
// counter, so their assignment to goroutines varies from call to call;
// callers whose ranges write disjoint outputs get the same results anyway.
// fn may itself call For: a loop that finds no idle worker runs on its
// caller alone.
func For(n, chunk, threads int, fn func(lo, hi int)) {
	if n <= 0 {
		return
	}
	chunk = max(chunk, 1)
	helpers := min(threads, (n+chunk-1)/chunk, maxWorkers+1) - 1
	if helpers <= 0 {
		fn(0, n)
		return
	}
	j := jobs.Get().(*job)
	j.fn, j.n, j.chunk = fn, n, chunk
	j.at = nanotime()
	j.next.Store(0)
	j.claim(helpers)
	j.run()
	j.finish()
	j.fn = nil
	jobs.Put(j)
}

// job is one call of For.
type job struct {
	next    atomic.Int64 // the start of the next unclaimed range
	_       [cacheLine - 8]byte
	fn      func(lo, hi int)
	n       int
	chunk   int
	at      int64         // when the caller handed it out (nanotime)
	want    int32         // helpers asked for
	pending atomic.Int32  // of want, those not accounted for yet
	done    chan struct{} // the last helper to report sends here
	helpers []*worker     // claimed by this call
}

var jobs = sync.Pool{New: func() any { return &job{done: make(chan struct{}, 1)} }}

// run takes ranges until none are left.
func (j *job) run() {
	fn, n, chunk := j.fn, int64(j.n), int64(j.chunk)
	for {
		lo := j.next.Add(chunk) - chunk
		if lo >= n {
			return
		}
		fn(int(lo), int(min(lo+chunk, n)))
	}
}

// claim hands j to up to want idle workers.
func (j *job) claim(want int) {
	j.helpers = j.helpers[:0]
	j.want = int32(want)
	// Set before any worker can see j: each helper takes one off, the
	// caller the rest (never claimed or taken back) in finish.
	j.pending.Store(j.want)
	ws := workersFor(want)
	for _, w := range ws {
		if len(j.helpers) == want {
			break
		}
		if w.slot.CompareAndSwap(nil, j) {
			j.helpers = append(j.helpers, w)
		}
	}
	for _, w := range j.helpers {
		// A worker that parked after its last poll needs its token; one
		// still polling sees the slot. Exactly one side clears parked.
		if w.parked.Swap(false) {
			w.wake <- struct{}{}
		}
	}
}

// finish takes back the helpers that have not started (all ranges are
// taken, so waiting for them to wake would only add their wake-up) and
// waits for the others to finish their last range.
func (j *job) finish() {
	mine := j.want - int32(len(j.helpers))
	for _, w := range j.helpers {
		if w.slot.CompareAndSwap(j, nil) {
			mine++
		}
	}
	clear(j.helpers) // no references to workers from pooled jobs
	// Whoever takes pending to zero decides: a helper sends on done, the
	// caller (when no helper ran, or all have reported) does not wait.
	if mine > 0 && j.pending.Add(-mine) == 0 {
		return
	}
	if spinWindow > 0 {
		// The helpers are finishing their last ranges, as the caller did:
		// poll briefly rather than park.
		start := nanotime()
		for i := 0; len(j.done) == 0; i++ {
			if i%16 == 15 {
				if nanotime()-start > spinWindow {
					break
				}
				runtime.Gosched()
			}
		}
	}
	<-j.done
}

// worker is one persistent helper goroutine.
type worker struct {
	// slot is nil while idle, the job a caller handed over, or running.
	slot   atomic.Pointer[job]
	parked atomic.Bool
	wake   chan struct{}
	// backToBack: its last job came within spinWindow of it going idle,
	// so it polls that long before parking (owned by the worker).
	backToBack bool
	_          [cacheLine]byte
}

// running marks a worker's slot while it works on a job.
var running = new(job)

var (
	growMu sync.Mutex
	all    atomic.Pointer[[]*worker]
)

// workersFor returns the workers, started so far that there are at least
// want of them.
func workersFor(want int) []*worker {
	if p := all.Load(); p != nil && len(*p) >= want {
		return *p
	}
	growMu.Lock()
	defer growMu.Unlock()
	var ws []*worker
	if p := all.Load(); p != nil {
		ws = *p
	}
	if len(ws) < want {
		ws = append([]*worker(nil), ws...)
		for len(ws) < want {
			w := &worker{wake: make(chan struct{}, 1)}
			go w.loop()
			ws = append(ws, w)
		}
		all.Store(&ws)
	}
	return ws
}

// loop runs the jobs handed to w, for the life of the process.
func (w *worker) loop() {
	for {
		j := w.take()
		j.run()
		// Idle again before reporting, so that the caller's next loop,
		// which may start right after the report, finds this worker.
		w.slot.Store(nil)
		if j.pending.Add(-1) == 0 {
			j.done <- struct{}{}
		}
	}
}

// take returns the next job handed to w that it won the race against its
// caller's revocation for, parking until one comes.
func (w *worker) take() *job {
	idle := nanotime()
	got := func(j *job) *job {
		w.backToBack = j.at-idle < spinWindow
		return j
	}
	if w.backToBack {
		for i := 0; ; i++ {
			if j := w.poll(); j != nil {
				return got(j)
			}
			runtime.Gosched()
			if i%16 == 15 && nanotime()-idle > spinWindow {
				break
			}
		}
	}
	for {
		if j := w.poll(); j != nil {
			return got(j)
		}
		w.parked.Store(true)
		if w.pending() && w.parked.Swap(false) {
			continue // no caller will send a token
		}
		<-w.wake
	}
}

// pending reports whether a caller has handed w a job.
func (w *worker) pending() bool {
	j := w.slot.Load()
	return j != nil && j != running
}

// poll takes a handed-over job unless its caller took it back first.
func (w *worker) poll() *job {
	j := w.slot.Load()
	if j == nil || j == running || !w.slot.CompareAndSwap(j, running) {
		return nil
	}
	return j
}

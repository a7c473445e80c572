package plugin

import (
	"context"
	"fmt"
	"time"
)

// Stager decides which weight bytes are resident and brings them in from
// storage. The core tells it which routed experts a layer will need (Hint),
// then asks for the bytes of a step (Acquire), computes on them in place and
// gives them back (Release). Bytes never cross the plugin boundary: Acquire
// answers with locations in regions that both processes map.
//
// A Stager's methods may be called concurrently; Acquire of one step may
// overlap Hint of another.
type Stager interface {
	// Describe says which options the stager takes. The host calls it
	// first, checks the profile against it and sends Open only the
	// declared options.
	Describe(ctx context.Context) (*StagerInfo, error)
	// Open opens the shards and prepares the cache within the budget. It
	// reads the always-needed tensors before it returns.
	Open(ctx context.Context, req *OpenRequest) (*OpenResponse, error)
	// Hint says which experts of a layer will be needed soon. It returns at
	// once; reads happen in the background.
	Hint(ctx context.Context, req *HintRequest) error
	// Acquire blocks until every requested slice is resident, pins it for
	// req.Step and says where it is. A Partial request waits only for its
	// first Wait slices and hands over the others that are resident now.
	Acquire(ctx context.Context, req *AcquireRequest) (*AcquireResponse, error)
	// Release unpins everything acquired for a step. Through a plugin
	// process it travels with the next Acquire (or Stats), so it costs no
	// round trip of its own; the stager applies it before the new pins.
	Release(ctx context.Context, req *ReleaseRequest) error
	// Stats reports counters accumulated since Open.
	Stats(ctx context.Context) (*Stats, error)
	// Close drops the cache and closes the shards.
	Close(ctx context.Context) error
}

// StagerInfo advertises a Stager.
type StagerInfo struct {
	// Name is for logs and errors, e.g. "staging-pread".
	Name string
	// Options are the options the stager takes (none: it takes none, and a
	// profile that sets one is refused).
	Options []OptionSpec
}

// OpenRequest describes the model's weights as byte ranges of shard files:
// the stager needs no GGUF parsing, only where each tensor lies.
type OpenRequest struct {
	// Shards are the paths of the shard files; Tensor.Shard indexes them.
	Shards []string
	// Budget is the most memory, in bytes, the stager may keep resident on
	// the model's behalf: its slot memory, page cache it holds, locked pages.
	Budget int64
	// ShmDir is a directory on a memory filesystem where the stager creates
	// its shared-memory files. The host owns it and removes it after Close
	// or a crash.
	ShmDir string
	// Tensors lists every weight the core will Acquire; a tensor's index is
	// its ID in Slice.Tensor.
	Tensors []Tensor
	// Options holds every option the stager declared (StagerInfo.Options),
	// each checked against its type, defaults filled in: the host refuses a
	// profile with an undeclared key before it starts any work.
	Options map[string]string
}

// Tensor is one weight as a byte range of a shard file.
type Tensor struct {
	// Name is for errors and logs only.
	Name   string
	Shard  int
	Offset int64
	Size   int64
	// Layer is the block the tensor belongs to, -1 for none. Hints name
	// layers, so every routed tensor of a layer is read together.
	Layer int
	// Experts is 0 for an always-needed tensor, which is kept resident. For
	// a routed-expert tensor it is the expert count: expert e occupies
	// [Offset+e*ExpertSize, Offset+(e+1)*ExpertSize).
	Experts    int
	ExpertSize int64
}

// Routed reports whether t is a routed-expert tensor.
func (t Tensor) Routed() bool { return t.Experts > 0 }

// CheckSlices reports the first slice that names no tensor of r, or an
// expert its tensor does not have; stagers call it before pinning anything.
func (r *OpenRequest) CheckSlices(slices []Slice) error {
	for _, sl := range slices {
		if sl.Tensor < 0 || sl.Tensor >= len(r.Tensors) {
			return fmt.Errorf("acquire: no tensor %d", sl.Tensor)
		}
		t := r.Tensors[sl.Tensor]
		if t.Routed() && (sl.Expert < 0 || sl.Expert >= t.Experts) {
			return fmt.Errorf("acquire: tensor %q has %d experts, not %d", t.Name, t.Experts, sl.Expert)
		}
	}
	return nil
}

// RoutedLayer is the highest layer of the slices' routed tensors (the
// layer an Acquire reaches), -1 if none is routed. Slices must have
// passed CheckSlices.
func (r *OpenRequest) RoutedLayer(slices []Slice) int32 {
	layer := int32(-1)
	for _, sl := range slices {
		if t := r.Tensors[sl.Tensor]; t.Routed() {
			layer = max(layer, int32(t.Layer))
		}
	}
	return layer
}

// Validate checks t against the shard count, naming the tensor at fault.
func (t Tensor) Validate(shards int) error {
	switch {
	case t.Shard < 0 || t.Shard >= shards:
		return fmt.Errorf("tensor %q: shard %d of %d", t.Name, t.Shard, shards)
	case t.Offset < 0 || t.Size <= 0:
		return fmt.Errorf("tensor %q: bad range offset %d size %d", t.Name, t.Offset, t.Size)
	case t.Experts < 0:
		return fmt.Errorf("tensor %q: %d experts", t.Name, t.Experts)
	case t.Experts > 0 && (t.ExpertSize <= 0 || int64(t.Experts)*t.ExpertSize > t.Size):
		return fmt.Errorf("tensor %q: %d experts of %d bytes exceed its %d bytes", t.Name, t.Experts, t.ExpertSize, t.Size)
	case t.Experts > 0 && t.Layer < 0:
		return fmt.Errorf("tensor %q: routed tensor without a layer", t.Name)
	}
	return nil
}

// OpenResponse says where the stager puts bytes.
type OpenResponse struct {
	// Regions are the memory areas Acquire's locations point into.
	Regions []Region
	// Mode is one human-readable line for the run's mode line, e.g.
	// "pread direct-io=on workers=4 policy=lfru slots=1203".
	Mode string
}

// RegionKind says what a Region's file is.
type RegionKind int

const (
	// RegionShard is a GGUF shard file, mapped read-only.
	RegionShard RegionKind = iota + 1
	// RegionShm is a stager's slot memory: a shared-memory file.
	RegionShm
)

func (k RegionKind) String() string {
	switch k {
	case RegionShard:
		return "shard"
	case RegionShm:
		return "shm"
	}
	return fmt.Sprintf("RegionKind(%d)", int(k))
}

// Region is a file both sides map. The reader maps it once (read-only) and
// resolves every Location into it.
type Region struct {
	Kind RegionKind
	Path string
	Size int64
}

// HintRequest names experts of one layer that will be needed soon.
type HintRequest struct {
	Layer   int
	Experts []int
	// Speculative marks a guess (the next layer's router run early); reads
	// for layers already routed (Speculative false) go first.
	Speculative bool
}

// AcquireRequest asks for the bytes of one step.
type AcquireRequest struct {
	// Step identifies the pins; Release(Step) drops them. Acquiring again
	// with the same Step adds pins to it.
	Step   uint64
	Slices []Slice
	// Partial lets the core compute what is resident while the rest is
	// still being read: Acquire waits for (and reads, if need be) only the
	// first Wait slices, pins every other slice whose bytes are resident
	// now, and lists the rest in AcquireResponse.Pending, neither pinned
	// nor waited for (their reads stay as their hints queued them). A
	// stager that ignores Partial (one built on an SDK before it) waits for
	// every slice and lists none pending, which is a correct answer too:
	// the core then computes everything it asked for.
	Partial bool
	Wait    int
}

// Waited reports whether slice i of req must be resident when Acquire
// returns: every slice of a plain request, the first Wait of a Partial
// one.
func (req *AcquireRequest) Waited(i int) bool { return !req.Partial || i < req.Wait }

// Slice names the bytes of a tensor, or of one expert of a routed tensor.
type Slice struct {
	Tensor int
	// Expert is ignored for an always-needed tensor.
	Expert int
}

// AcquireResponse has one Location per requested slice, in order.
type AcquireResponse struct {
	Locations []Location
	// Pending lists, ascending, the slices of a Partial request that were
	// not resident: not pinned, their Locations zero. Empty for a plain
	// request.
	Pending []int
}

// Location is where a slice's bytes lie: Size bytes at Offset in
// OpenResponse.Regions[Region].
type Location struct {
	Region int
	Offset int64
	Size   int64
}

// ReleaseRequest unpins a step.
type ReleaseRequest struct {
	Step uint64
}

// Stats are a stager's counters since Open; bench records and the mode
// line are built from them.
type Stats struct {
	// Hits and Misses count acquired expert slices that were or were not
	// resident when asked for. A slice a partial Acquire leaves pending is
	// counted once, when an Acquire pins it: the hit rate then says what
	// was resident when the compute took it, higher than plain Acquires'
	// for the same reads (bytes read are the measure to compare).
	Hits, Misses uint64
	// Evictions counts cache entries dropped to make room.
	Evictions uint64
	// Reads and BytesRead count reads issued to storage; ReadTime is their
	// summed latency.
	Reads     uint64
	BytesRead int64
	ReadTime  time.Duration
	// WaitTime is how long Acquire calls blocked on storage: the time the
	// compute waited.
	WaitTime time.Duration
	// ResidentBytes is what the stager holds now (for staging-mmap: mincore
	// of the shards); BudgetBytes the budget it works within.
	ResidentBytes int64
	BudgetBytes   int64
	// DirectIO reports whether reads bypass the page cache.
	DirectIO bool
	Mode     string
	// Devices splits the reads by the device (or directory) group the
	// stager reads each shard through, one worker pool per group; empty
	// for a stager that keeps no such split.
	Devices []DeviceStats
}

// DeviceStats are one device group's share of a stager's reads.
type DeviceStats struct {
	// Name is the device ("259:1" major:minor) or, grouped per file, the
	// shard's directory.
	Name string
	// Workers is the group's concurrent reads; Shards the shard indexes
	// it serves.
	Workers   int
	Shards    []int
	Reads     uint64
	BytesRead int64
	ReadTime  time.Duration
}

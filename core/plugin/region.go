package plugin

import (
	"fmt"
	"os"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Views maps the regions a stager reported, read-only, so a reader (the
// core, a kernels plugin) can resolve Locations to bytes. Mapping is shared:
// shard pages come from the page cache, slot pages from the stager's file,
// nothing is copied.
type Views struct {
	regions []Region
	mem     [][]byte
}

// MapRegions maps every region read-only.
func MapRegions(regions []Region) (*Views, error) {
	v := &Views{regions: regions, mem: make([][]byte, len(regions))}
	for i, r := range regions {
		m, err := mapReadOnly(r.Path)
		if err != nil {
			v.Close()
			return nil, fmt.Errorf("region %d (%s): %w", i, r.Kind, err)
		}
		if r.Kind == RegionShard && m != nil {
			// The stager decides what is read; a fault must not pull in
			// the neighbouring experts behind its back.
			_ = unix.Madvise(m, unix.MADV_RANDOM)
		}
		v.mem[i] = m
	}
	return v, nil
}

// Forget drops this process's page mappings of the locations in shard
// regions, so that a stager that evicts them can drop them from the page
// cache (pages still mapped by any process stay cached). Call it before
// Release; the bytes stay readable, at the cost of a fault.
//
// A fault maps not just its page but cached pages around it: the
// kernel's fault-around (64 KiB by default, aligned in the address space)
// and, where the page cache holds large folios (ext4 and xfs on 6.x
// kernels), the whole folio (up to 2 MiB, aligned in the file). So the
// aligned windows of both around each location are dropped; neighbours
// dropped with them fault back in when next used.
func (v *Views) Forget(locs []Location) {
	const (
		around = 64 << 10 // fault-around, in the address space
		folio  = 2 << 20  // largest page-cache folio, in the file
	)
	for _, l := range locs {
		if l.Region < 0 || l.Region >= len(v.mem) || v.regions[l.Region].Kind != RegionShard {
			continue
		}
		m := v.mem[l.Region]
		if len(m) == 0 {
			continue
		}
		// Shards are mapped from file offset 0: an offset in m is one in
		// the file.
		base := int64(uintptr(unsafe.Pointer(&m[0])))
		start := min((base+l.Offset)&^(around-1)-base, l.Offset&^(folio-1))
		end := max((base+l.Offset+l.Size+around-1)&^(around-1)-base, (l.Offset+l.Size+folio-1)&^(folio-1))
		start, end = max(start, 0), min(end, int64(len(m)))
		if start < end {
			_ = unix.Madvise(m[start:end], unix.MADV_DONTNEED)
		}
	}
}

func mapReadOnly(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if st.Size() == 0 {
		return nil, nil
	}
	m, err := unix.Mmap(int(f.Fd()), 0, int(st.Size()), unix.PROT_READ, unix.MAP_SHARED)
	if err != nil {
		return nil, fmt.Errorf("mmap %s: %w", path, err)
	}
	return m, nil
}

// Bytes returns the bytes at loc.
func (v *Views) Bytes(loc Location) ([]byte, error) {
	if loc.Region < 0 || loc.Region >= len(v.mem) {
		return nil, fmt.Errorf("location: region %d of %d", loc.Region, len(v.mem))
	}
	m := v.mem[loc.Region]
	if loc.Offset < 0 || loc.Size < 0 || loc.Offset+loc.Size > int64(len(m)) {
		return nil, fmt.Errorf("location: [%d,+%d) outside region %d (%s, %d bytes)", loc.Offset, loc.Size, loc.Region, v.regions[loc.Region].Path, len(m))
	}
	return m[loc.Offset : loc.Offset+loc.Size : loc.Offset+loc.Size], nil
}

// Close unmaps every region.
func (v *Views) Close() error {
	var first error
	for i, m := range v.mem {
		if m != nil {
			if err := unix.Munmap(m); err != nil && first == nil {
				first = err
			}
			v.mem[i] = nil
		}
	}
	return first
}

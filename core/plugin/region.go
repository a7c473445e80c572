package plugin

import (
	"fmt"
	"os"

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
		v.mem[i] = m
	}
	return v, nil
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

package engine

import (
	"bufio"
	"bytes"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"unsafe"

	"github.com/k3-inference/k3/core/plugin"
)

// fileMaps finds which file, at which offset, an address of this process
// is mapped from. Whoever mapped a weight (the gguf reader, a stager's
// views) did so with a shared mapping of a file the plugin can map too, so
// the kernels need no API from them: the kernel's own table of mappings
// says where each weight lives.
type fileMaps struct {
	mu     sync.Mutex
	maps   []fileMap // sorted by start
	misses map[uintptr]bool
}

type fileMap struct {
	start, end uintptr
	off        int64
	path       string
}

// resolve returns the file and offset of the size bytes at p, re-reading
// the table once when p is in no mapping it knows (mappings come and go as
// stagers remap).
func (m *fileMaps) resolve(p *byte, size int64) (string, int64, bool) {
	a := uintptr(unsafe.Pointer(p))
	m.mu.Lock()
	defer m.mu.Unlock()
	if path, off, ok := m.find(a, size); ok {
		return path, off, true
	}
	if m.misses[a] {
		return "", 0, false
	}
	m.maps = readFileMaps()
	m.misses = map[uintptr]bool{}
	if path, off, ok := m.find(a, size); ok {
		return path, off, true
	}
	m.misses[a] = true
	return "", 0, false
}

// reset drops the table; the next resolve reads it again.
func (m *fileMaps) reset() {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.maps, m.misses = nil, nil
}

func (m *fileMaps) find(a uintptr, size int64) (string, int64, bool) {
	i := sort.Search(len(m.maps), func(i int) bool { return m.maps[i].end > a })
	if i == len(m.maps) || m.maps[i].start > a {
		return "", 0, false
	}
	// A file mapped in one piece can show as adjacent entries (after an
	// madvise or mprotect); follow them while they continue the file.
	f := m.maps[i]
	end := f.end
	for j := i + 1; j < len(m.maps) && m.maps[j].start == end && m.maps[j].path == f.path &&
		m.maps[j].off == f.off+int64(end-f.start); j++ {
		end = m.maps[j].end
	}
	if a+uintptr(size) > end {
		return "", 0, false
	}
	return f.path, f.off + int64(a-f.start), true
}

// readFileMaps parses /proc/self/maps: "start-end perms offset dev inode path".
func readFileMaps() []fileMap {
	data, err := os.ReadFile("/proc/self/maps")
	if err != nil {
		return nil
	}
	var out []fileMap
	s := bufio.NewScanner(bytes.NewReader(data))
	for s.Scan() {
		f := strings.Fields(s.Text())
		if len(f) < 6 || !strings.HasPrefix(f[5], "/") || len(f) > 6 || len(f[1]) < 4 || f[1][0] != 'r' {
			continue // anonymous, special ([heap]), or a deleted file
		}
		lo, hi, ok := strings.Cut(f[0], "-")
		if !ok {
			continue
		}
		start, err1 := strconv.ParseUint(lo, 16, 64)
		end, err2 := strconv.ParseUint(hi, 16, 64)
		off, err3 := strconv.ParseInt(f[2], 16, 64)
		if err1 != nil || err2 != nil || err3 != nil {
			continue
		}
		out = append(out, fileMap{start: uintptr(start), end: uintptr(end), off: off, path: f[5]})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].start < out[j].start })
	return out
}

// regionKind tells a stager's shared-memory slots from a model file.
func regionKind(path string) plugin.RegionKind {
	if strings.HasPrefix(path, "/dev/shm/") {
		return plugin.RegionShm
	}
	return plugin.RegionShard
}

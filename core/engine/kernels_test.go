package engine

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

func TestChooseKernels(t *testing.T) {
	none, avx2, avx512 := CPU{}, CPU{AVX2: true}, CPU{AVX2: true, AVX512: true}
	for _, tc := range []struct {
		name string
		cpu  CPU
		want string
		err  string
	}{
		{"auto", avx512, "avx512", ""},
		{"auto", avx2, "avx2", ""},
		{"auto", none, "reference", ""},
		{"", avx2, "avx2", ""},
		{"reference", avx512, "reference", ""},
		{"avx2", avx512, "avx2", ""},
		{"avx512", avx512, "avx512", ""},
		{"avx512", avx2, "", "lacks AVX-512"},
		{"avx2", none, "", "lacks AVX2"},
		{"avx1024", avx512, "", "not one of"},
	} {
		t.Run(tc.name+"/"+map[CPU]string{none: "none", avx2: "avx2", avx512: "avx512"}[tc.cpu], func(t *testing.T) {
			got, err := ChooseKernels(tc.name, tc.cpu)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Errorf("ChooseKernels(%q, %+v) = %q, %v; want an error containing %q", tc.name, tc.cpu, got, err, tc.err)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Errorf("ChooseKernels(%q, %+v) = %q, %v; want %q", tc.name, tc.cpu, got, err, tc.want)
			}
		})
	}
}

// TestFileMapsResolve maps a file at an offset and finds every byte of it
// again by address, and nothing outside it.
func TestFileMapsResolve(t *testing.T) {
	path := filepath.Join(t.TempDir(), "w.bin")
	page := int64(os.Getpagesize())
	if err := os.WriteFile(path, make([]byte, 4*page), 0o600); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	m, err := unix.Mmap(int(f.Fd()), page, int(2*page), unix.PROT_READ, unix.MAP_SHARED)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Munmap(m)
	var fm fileMaps
	for _, off := range []int64{0, 100, 2*page - 8} {
		p, o, ok := fm.resolve(&m[off], 8)
		if !ok || p != path || o != page+off {
			t.Errorf("resolve(+%d) = %q, %d, %v; want %q, %d", off, p, o, ok, path, page+off)
		}
	}
	if _, _, ok := fm.resolve(&m[2*page-8], 16); ok {
		t.Error("a range past the mapping resolved")
	}
	heap := make([]byte, 64)
	if _, _, ok := fm.resolve(&heap[0], 64); ok {
		t.Error("Go heap memory resolved to a file")
	}
}

// TestFollowResetsFileMaps: Follow ties the kernels' table of mappings to
// the stager's remaps (a restarted stager maps its regions anew, and a new
// mapping can take an old one's address), and Follows says so.
func TestFollowResetsFileMaps(t *testing.T) {
	k, s := &PluginKernels{}, &Staged{}
	if k.Follows(s) {
		t.Fatal("follows a stager before Follow")
	}
	k.Follow(s)
	if !k.Follows(s) || k.Follows(&Staged{}) {
		t.Fatal("Follows does not name the stager Follow was given")
	}
	k.files.maps = []fileMap{{start: 4096, end: 8192, path: "/dev/shm/old-slots"}}
	k.files.misses = map[uintptr]bool{1: true}
	if len(s.onRemap) != 1 {
		t.Fatalf("%d remap hooks, want Follow's", len(s.onRemap))
	}
	for _, fn := range s.onRemap {
		if err := fn(); err != nil {
			t.Fatal(err)
		}
	}
	if k.files.maps != nil || k.files.misses != nil {
		t.Error("a remap left the kernels' table of mappings in place")
	}
}

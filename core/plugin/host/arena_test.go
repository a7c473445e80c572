package host

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/k3-inference/k3/core/plugin/internal/wire"
)

func TestArenaNameCarriesPid(t *testing.T) {
	dir := t.TempDir()
	a, err := CreateArena(dir, 4096)
	if err != nil {
		t.Fatal(err)
	}
	pid, ok := wire.ShmOwner(filepath.Base(a.Path()))
	if !ok || pid != os.Getpid() {
		t.Fatalf("arena %s: owner %d %v", a.Path(), pid, ok)
	}
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(a.Path()); !os.IsNotExist(err) {
		t.Fatalf("arena file left after Close: %v", err)
	}
}

// TestDoorbellEnvName: the name the host documents is the one both ends
// read.
func TestDoorbellEnvName(t *testing.T) {
	if DoorbellEnv != wire.DoorbellEnv {
		t.Errorf("host.DoorbellEnv %q, the SDK reads %q", DoorbellEnv, wire.DoorbellEnv)
	}
}

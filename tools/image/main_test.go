package main

import (
	"archive/tar"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// k3Binary is the static k3 the image holds: $K3_BIN (CI passes the one it
// built), else one built here with CGO_ENABLED=0.
func k3Binary(t *testing.T) string {
	if p := os.Getenv("K3_BIN"); p != "" {
		abs, err := filepath.Abs(p)
		if err != nil {
			t.Fatal(err)
		}
		return abs
	}
	if testing.Short() {
		t.Skip("-short: building k3 takes a minute; set K3_BIN")
	}
	out := filepath.Join(t.TempDir(), "k3")
	cmd := exec.Command("go", "build", "-trimpath", "-o", out, "./cmd/k3")
	cmd.Dir = filepath.Join("..", "..")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build ./cmd/k3: %v\n%s", err, b)
	}
	return out
}

// TestImage builds the image tarball, reads it back as a runtime would,
// checks its config, extracts the binary from the layer and runs
// `k3 version` with it; a second build of the same binary has the same
// digest.
func TestImage(t *testing.T) {
	bin := k3Binary(t)
	dir := t.TempDir()
	o := options{bin: bin, arch: "amd64", tag: "k3:test", out: filepath.Join(dir, "k3.tar"), docs: filepath.Join("..", ".."), epoch: time.Unix(1700000000, 0).UTC()}
	if err := build(o); err != nil {
		t.Fatal(err)
	}
	img, err := tarball.ImageFromPath(o.out, nil)
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	c := cfg.Config
	if c.User != User || !slices.Equal(c.Entrypoint, []string{"/" + BinPath}) || cfg.Architecture != "amd64" || cfg.OS != "linux" {
		t.Errorf("config %+v", cfg)
	}
	if _, ok := c.Volumes[ModelsDir]; !ok {
		t.Errorf("no %s volume: %v", ModelsDir, c.Volumes)
	}
	if _, ok := c.ExposedPorts[Port]; !ok {
		t.Errorf("port %s not exposed: %v", Port, c.ExposedPorts)
	}
	if !cfg.Created.Time.Equal(o.epoch) {
		t.Errorf("created %v, want %v", cfg.Created.Time, o.epoch)
	}
	layers, err := img.Layers()
	if err != nil || len(layers) != 1 {
		t.Fatalf("layers %d, %v: want one", len(layers), err)
	}
	rc, err := layers[0].Uncompressed()
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	root := filepath.Join(dir, "rootfs")
	seen := extract(t, tar.NewReader(rc), root)
	for _, want := range []string{"models/", "tmp/", BinPath, "usr/share/doc/k3/LICENSE", "usr/share/doc/k3/THIRD_PARTY_LICENSES", "etc/passwd"} {
		if !seen[want] {
			t.Errorf("layer lacks %s", want)
		}
	}
	out, err := exec.Command(filepath.Join(root, BinPath), "version").CombinedOutput()
	if err != nil || !strings.HasPrefix(string(out), "k3 ") || !strings.Contains(string(out), "commit:") {
		t.Fatalf("k3 version from the image: %v\n%s", err, out)
	}
	t.Logf("k3 version in the image:\n%s", out)

	d1, err := img.Digest()
	if err != nil {
		t.Fatal(err)
	}
	again, err := Image(o)
	if err != nil {
		t.Fatal(err)
	}
	if d2, err := again.Digest(); err != nil || d2 != d1 {
		t.Errorf("a second build: digest %v (%v), first %v", d2, err, d1)
	}
}

// extract writes the layer's regular files under root and returns every
// entry's name.
func extract(t *testing.T, tr *tar.Reader, root string) map[string]bool {
	seen := map[string]bool{}
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return seen
		}
		if err != nil {
			t.Fatal(err)
		}
		seen[h.Name] = true
		if h.Typeflag != tar.TypeReg {
			continue
		}
		p := filepath.Join(root, filepath.FromSlash(h.Name))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		f, err := os.OpenFile(p, os.O_CREATE|os.O_WRONLY, os.FileMode(h.Mode)&0o777)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := io.Copy(f, tr); err != nil {
			t.Fatal(err)
		}
		if err := f.Close(); err != nil {
			t.Fatal(err)
		}
	}
}

func TestBadInput(t *testing.T) {
	dir := t.TempDir()
	notELF := filepath.Join(dir, "script")
	if err := os.WriteFile(notELF, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, o := range []options{
		{},
		{bin: notELF, arch: "amd64", tag: "k3:x", out: filepath.Join(dir, "a.tar")},
		{bin: notELF, arch: "riscv", tag: "k3:x", out: filepath.Join(dir, "b.tar")},
		{bin: notELF, arch: "amd64", tag: "Not A Tag", out: filepath.Join(dir, "c.tar")},
	} {
		if err := build(o); err == nil {
			t.Errorf("build(%+v) succeeded", o)
		}
	}
}

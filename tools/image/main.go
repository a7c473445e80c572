// Command image builds k3's container image without a Docker daemon or a
// registry: one layer holding the static k3 binary (tools/release/build.sh
// or CGO_ENABLED=0 go build), on no base image at all, written as a
// docker-archive tarball (`docker load -i`, `podman load -i`,
// `skopeo copy docker-archive:...`).
//
//	go run . -bin ../../bin/k3 -arch amd64 -tag k3:v0.1.0 -o k3-image.tar
//
// ko would do the same from a Go import path, but it needs a base image
// from a registry; k3 is one static binary and needs none. The tool is its
// own module so go-containerregistry and its dependencies stay out of the
// k3 module.
//
// The image: /usr/local/bin/k3 as the entrypoint (`serve --host 0.0.0.0
// --port 8080 -m /models/model.gguf` by default), the licenses under
// /usr/share/doc/k3, a /models volume the model is mounted on read-only,
// a world-writable /tmp for the plugin sockets, user 65532 (nonroot), port
// 8080. Every time in it is SOURCE_DATE_EPOCH, so one binary gives one
// image digest.
package main

import (
	"archive/tar"
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// Where things are in the image.
const (
	BinPath   = "usr/local/bin/k3"
	ModelsDir = "/models"
	User      = "65532:65532"
	Port      = "8080/tcp"
)

func main() {
	var o options
	flag.StringVar(&o.bin, "bin", "", "the static linux k3 binary to put in the image")
	flag.StringVar(&o.arch, "arch", "amd64", "the binary's architecture (amd64 or arm64)")
	flag.StringVar(&o.tag, "tag", "k3:dev", "the image's name and tag")
	flag.StringVar(&o.out, "o", "k3-image.tar", "the docker-archive tarball to write")
	flag.StringVar(&o.docs, "docs", "", "a directory whose LICENSE and THIRD_PARTY_LICENSES go into /usr/share/doc/k3 (default: the repository root)")
	flag.Parse()
	o.epoch = time.Unix(0, 0).UTC()
	if s := os.Getenv("SOURCE_DATE_EPOCH"); s != "" {
		sec, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			fmt.Fprintf(os.Stderr, "image: SOURCE_DATE_EPOCH %q: %v\n", s, err)
			os.Exit(2)
		}
		o.epoch = time.Unix(sec, 0).UTC()
	}
	if err := build(o); err != nil {
		fmt.Fprintln(os.Stderr, "image:", err)
		os.Exit(1)
	}
}

type options struct {
	bin, arch, tag, out, docs string
	epoch                     time.Time
}

func build(o options) error {
	if o.bin == "" {
		return errors.New("-bin is required")
	}
	if o.arch != "amd64" && o.arch != "arm64" {
		return fmt.Errorf("-arch %q: want amd64 or arm64", o.arch)
	}
	if o.docs == "" {
		o.docs = filepath.Join("..", "..")
	}
	tag, err := name.NewTag(o.tag)
	if err != nil {
		return fmt.Errorf("-tag: %w", err)
	}
	img, err := Image(o)
	if err != nil {
		return err
	}
	return tarball.WriteToFile(o.out, tag, img)
}

// Image assembles the image from o.
func Image(o options) (v1.Image, error) {
	layerTar, err := rootfs(o)
	if err != nil {
		return nil, err
	}
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(layerTar)), nil
	})
	if err != nil {
		return nil, err
	}
	img, err := mutate.Append(empty.Image, mutate.Addendum{
		Layer:   layer,
		History: v1.History{CreatedBy: "k3 tools/image", Created: v1.Time{Time: o.epoch}},
	})
	if err != nil {
		return nil, err
	}
	cfg, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	cfg = cfg.DeepCopy()
	cfg.Architecture, cfg.OS = o.arch, "linux"
	cfg.Created = v1.Time{Time: o.epoch}
	cfg.Author = "the k3 authors"
	cfg.Config = v1.Config{
		Entrypoint:   []string{"/" + BinPath},
		Cmd:          []string{"serve", "--host", "0.0.0.0", "--port", "8080", "-m", ModelsDir + "/model.gguf"},
		User:         User,
		WorkingDir:   "/",
		Env:          []string{"PATH=/usr/local/bin", "TMPDIR=/tmp"},
		ExposedPorts: map[string]struct{}{Port: {}},
		Volumes:      map[string]struct{}{ModelsDir: {}},
		Labels: map[string]string{
			"org.opencontainers.image.title":    "k3",
			"org.opencontainers.image.licenses": "MIT",
			"org.opencontainers.image.source":   "https://github.com/k3-inference/k3",
		},
	}
	return mutate.ConfigFile(img, cfg)
}

// rootfs is the one layer's tar: directories, the binary, the licenses,
// every entry owned by root with a fixed time.
func rootfs(o options) ([]byte, error) {
	bin, err := os.ReadFile(o.bin)
	if err != nil {
		return nil, err
	}
	if len(bin) < 4 || string(bin[:4]) != "\x7fELF" {
		return nil, fmt.Errorf("%s is not an ELF binary", o.bin)
	}
	var b bytes.Buffer
	tw := tar.NewWriter(&b)
	dir := func(name string, mode int64) error {
		return tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: name + "/", Mode: mode, ModTime: o.epoch, Format: tar.FormatPAX})
	}
	file := func(name string, mode int64, data []byte) error {
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: name, Mode: mode, Size: int64(len(data)), ModTime: o.epoch, Format: tar.FormatPAX}); err != nil {
			return err
		}
		_, err := tw.Write(data)
		return err
	}
	for _, d := range []string{"etc", "models", "usr", "usr/local", "usr/local/bin", "usr/share", "usr/share/doc", "usr/share/doc/k3"} {
		if err := dir(d, 0o755); err != nil {
			return nil, err
		}
	}
	if err := dir("tmp", 0o1777); err != nil {
		return nil, err
	}
	// A passwd entry names user 65532, as distroless' nonroot does.
	if err := file("etc/passwd", 0o644, []byte("root:x:0:0:root:/:/sbin/nologin\nnonroot:x:65532:65532:nonroot:/:/sbin/nologin\n")); err != nil {
		return nil, err
	}
	if err := file("etc/group", 0o644, []byte("root:x:0:\nnonroot:x:65532:\n")); err != nil {
		return nil, err
	}
	if err := file(BinPath, 0o755, bin); err != nil {
		return nil, err
	}
	for _, n := range []string{"LICENSE", "THIRD_PARTY_LICENSES"} {
		text, err := os.ReadFile(filepath.Join(o.docs, n))
		if err != nil {
			return nil, err
		}
		if err := file("usr/share/doc/k3/"+n, 0o644, text); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}

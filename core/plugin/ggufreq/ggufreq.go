// Package ggufreq describes a GGUF model to a stager: it turns the tensor
// index of a core/gguf File into a plugin.OpenRequest. It lives apart from
// the SDK so that plugins, which see only byte ranges, do not depend on the
// GGUF parser.
package ggufreq

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/k3-inference/k3/core/gguf"
	"github.com/k3-inference/k3/core/model"
	"github.com/k3-inference/k3/core/plugin"
)

// OpenRequest lists every tensor of f as a byte range of its shard, with
// llama.cpp's naming of routed experts (model.LlamaExperts): see
// OpenRequestWith.
func OpenRequest(f *gguf.File) (*plugin.OpenRequest, error) {
	return OpenRequestWith(f, model.LlamaExperts)
}

// OpenRequestWith lists every tensor of f as a byte range of its shard. A
// tensor of a layer (blk.N.…) that routed says holds routed experts is
// routed: its last dimension counts the experts, each a contiguous slice.
// Everything else is always-needed. Budget, ShmDir and Options are the
// caller's.
func OpenRequestWith(f *gguf.File, routed func(name string, shape []int64) bool) (*plugin.OpenRequest, error) {
	req := &plugin.OpenRequest{Shards: f.Paths()}
	for _, ti := range f.Tensors() {
		t := plugin.Tensor{Name: ti.Name, Shard: ti.Shard, Offset: ti.Offset, Size: ti.Size, Layer: layerOf(ti.Name)}
		if t.Layer >= 0 && len(ti.Shape) >= 1 && routed(ti.Name, ti.Shape) {
			n := ti.Shape[len(ti.Shape)-1]
			if n <= 0 || ti.Size%n != 0 {
				return nil, fmt.Errorf("ggufreq: tensor %q: %d bytes do not split into %d experts", ti.Name, ti.Size, n)
			}
			t.Experts, t.ExpertSize = int(n), ti.Size/n
		}
		if err := t.Validate(len(req.Shards)); err != nil {
			return nil, fmt.Errorf("ggufreq: %w", err)
		}
		req.Tensors = append(req.Tensors, t)
	}
	return req, nil
}

// layerOf reads N from "blk.N.…", or -1.
func layerOf(name string) int {
	rest, ok := strings.CutPrefix(name, "blk.")
	if !ok {
		return -1
	}
	n, _, ok := strings.Cut(rest, ".")
	if !ok {
		return -1
	}
	l, err := strconv.Atoi(n)
	if err != nil || l < 0 {
		return -1
	}
	return l
}

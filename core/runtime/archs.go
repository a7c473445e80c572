package runtime

// The architectures compiled into k3: each registers itself with
// model.Register from init. A new architecture is its package under
// core/model and one line here.
import (
	_ "github.com/k3-inference/k3/core/model/deepseek2"
	_ "github.com/k3-inference/k3/core/model/kimik3"
	_ "github.com/k3-inference/k3/core/model/qwen3moe"
)

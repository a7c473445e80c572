package host

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/k3-inference/k3/core/plugin"
)

// ResolveOptions is what the host sends a plugin: every option specs
// declares, valued from set (the profile's explicit settings), then from
// implied (settings every plugin may use, sent only to one that declares
// them: a profile's defaults or auto-detected values), then from the
// declared default. A key of set that specs does not declare is an error
// naming the plugin and the key, as is a value that is not of its type.
// The checks are plugin.ParseOptions', which a plugin makes on what it is
// sent.
func ResolveOptions(name string, specs []plugin.OptionSpec, set, implied map[string]string) (map[string]string, error) {
	m := make(map[string]string, len(set)+len(specs))
	for k, v := range set {
		m[k] = v
	}
	for _, o := range specs {
		if _, ok := m[o.Name]; !ok {
			if v, ok := implied[o.Name]; ok {
				m[o.Name] = v
			}
		}
	}
	v, err := plugin.ParseOptions(specs, m)
	if err != nil {
		if name != "" {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
		return nil, err
	}
	return v, nil
}

// FormatOptions is resolved options as one mode-line field value:
// "k=v,k=v" in key order, "none" when empty.
func FormatOptions(m map[string]string) string {
	if len(m) == 0 {
		return "none"
	}
	var b strings.Builder
	for i, k := range slices.Sorted(maps.Keys(m)) {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(k + "=" + m[k])
	}
	return b.String()
}

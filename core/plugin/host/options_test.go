package host

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/k3-inference/k3/core/plugin"
)

var testSpecs = []plugin.OptionSpec{
	{Name: "io_workers", Type: plugin.OptionInt, Default: "4"},
	{Name: "direct_io", Type: plugin.OptionString, Default: "auto", Values: []string{"auto", "on", "off"}},
	{Name: "warm", Type: plugin.OptionBool, Default: "true"},
	{Name: "half_life", Type: plugin.OptionFloat, Default: "8"},
}

// TestResolveOptions: set keys must be declared, implied ones are taken
// only where declared, defaults fill the rest, and each value is checked
// against its type; every error names the plugin and the key.
func TestResolveOptions(t *testing.T) {
	got, err := ResolveOptions("stager x", testSpecs, map[string]string{"warm": "false"}, map[string]string{"io_workers": "8", "cache_policy": "lru"})
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"io_workers": "8", "direct_io": "auto", "warm": "false", "half_life": "8"}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("(-want +got):\n%s", d)
	}
	for _, c := range []struct {
		specs        []plugin.OptionSpec
		set, implied map[string]string
		want         string
	}{
		{nil, map[string]string{"io_workers": "4"}, nil, "stager x: unknown option io_workers (it takes no options)"},
		{testSpecs, map[string]string{"cache_policy": "lru"}, nil, "stager x: unknown option cache_policy (it takes io_workers, direct_io, warm, half_life)"},
		{testSpecs, map[string]string{"io_workers": "four"}, nil, `stager x: option io_workers="four": not an int`},
		{testSpecs, nil, map[string]string{"warm": "maybe"}, `stager x: option warm="maybe": not a bool`},
		{testSpecs, map[string]string{"direct_io": "always"}, nil, `stager x: option direct_io="always": not one of auto, on, off`},
		{[]plugin.OptionSpec{{Name: "a", Type: plugin.OptionInt, Default: "x"}}, nil, nil, `stager x: bad option declaration: default: option a="x": not an int`},
		{[]plugin.OptionSpec{{Name: "a", Type: plugin.OptionBool, Default: "true"}, {Name: "a", Type: plugin.OptionBool, Default: "true"}}, nil, nil, "declared twice"},
		{[]plugin.OptionSpec{{Name: "a", Type: 9}}, nil, nil, "unknown type 9"},
	} {
		_, err := ResolveOptions("stager x", c.specs, c.set, c.implied)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("set %v implied %v: error %v, want %q", c.set, c.implied, err, c.want)
		}
	}
}

// TestFormatOptions: resolved options as the mode line shows them.
func TestFormatOptions(t *testing.T) {
	v, err := plugin.ParseOptions(testSpecs, map[string]string{"io_workers": "2"})
	if err != nil {
		t.Fatal(err)
	}
	if got := FormatOptions(v); got != "direct_io=auto,half_life=8,io_workers=2,warm=true" {
		t.Errorf("FormatOptions = %q", got)
	}
	if got := FormatOptions(nil); got != "none" {
		t.Errorf("FormatOptions(nil) = %q", got)
	}
}

package plugin

import (
	"testing"
)

var testSpecs = []OptionSpec{
	{Name: "io_workers", Type: OptionInt, Default: "4"},
	{Name: "direct_io", Type: OptionString, Default: "auto", Values: []string{"auto", "on", "off"}},
	{Name: "warm", Type: OptionBool, Default: "true"},
	{Name: "half_life", Type: OptionFloat, Default: "8"},
}

func TestParseOptions(t *testing.T) {
	v, err := ParseOptions(testSpecs, map[string]string{"io_workers": "2"})
	if err != nil {
		t.Fatal(err)
	}
	if v.Int("io_workers") != 2 || v.String("direct_io") != "auto" || !v.Bool("warm") || v.Float("half_life") != 8 {
		t.Errorf("parsed %v", v)
	}
	if _, err := ParseOptions(testSpecs, map[string]string{"x": "1"}); err == nil || err.Error() != "unknown option x (it takes io_workers, direct_io, warm, half_life)" {
		t.Errorf("unknown key: %v", err)
	}
}

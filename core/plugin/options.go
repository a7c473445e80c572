package plugin

import (
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
)

// OptionType is the type of an option's value. Values travel as strings;
// the host checks that each parses as its type before the plugin sees it,
// so a plugin's own parsing of a declared option cannot fail.
type OptionType int

const (
	// OptionString accepts any text (or, with OptionSpec.Values, one of
	// those).
	OptionString OptionType = iota + 1
	// OptionInt accepts a base-10 integer (strconv.Atoi).
	OptionInt
	// OptionFloat accepts a float (strconv.ParseFloat).
	OptionFloat
	// OptionBool accepts what strconv.ParseBool does.
	OptionBool
)

func (t OptionType) String() string {
	switch t {
	case OptionString:
		return "string"
	case OptionInt:
		return "int"
	case OptionFloat:
		return "float"
	case OptionBool:
		return "bool"
	}
	return fmt.Sprintf("OptionType(%d)", int(t))
}

// OptionSpec declares one option a plugin accepts. A plugin lists its
// options in StagerInfo or KernelsInfo; the host validates the profile
// against them before any other call, rejects a key the plugin does not
// declare, and sends every declared option, the default filled in where
// the profile gives none.
type OptionSpec struct {
	// Name is the key in the profile, e.g. "io_workers".
	Name string
	Type OptionType
	// Default is the value sent when the profile gives none; it must be of
	// Type (and one of Values).
	Default string
	// Doc is one line for the guide and for error messages.
	Doc string
	// Values, when set, are the only values accepted (an enumeration).
	Values []string
}

// Check reports whether v is a valid value for o.
func (o OptionSpec) Check(v string) error {
	var err error
	switch o.Type {
	case OptionString:
	case OptionInt:
		_, err = strconv.Atoi(v)
	case OptionFloat:
		_, err = strconv.ParseFloat(v, 64)
	case OptionBool:
		_, err = strconv.ParseBool(v)
	default:
		return fmt.Errorf("option %s: unknown type %d", o.Name, int(o.Type))
	}
	if err != nil {
		return fmt.Errorf("option %s=%q: not %s %s", o.Name, v, article(o.Type), o.Type)
	}
	if len(o.Values) > 0 && !slices.Contains(o.Values, v) {
		return fmt.Errorf("option %s=%q: not one of %s", o.Name, v, strings.Join(o.Values, ", "))
	}
	return nil
}

func article(t OptionType) string {
	if t == OptionInt {
		return "an"
	}
	return "a"
}

// checkOptions checks a declaration: names unique and not empty, types
// known, defaults valid.
func checkOptions(specs []OptionSpec) error {
	seen := map[string]bool{}
	for _, o := range specs {
		if o.Name == "" {
			return fmt.Errorf("an option without a name")
		}
		if seen[o.Name] {
			return fmt.Errorf("option %s declared twice", o.Name)
		}
		seen[o.Name] = true
		if err := o.Check(o.Default); err != nil {
			return fmt.Errorf("default: %w", err)
		}
	}
	return nil
}

// resolveOptions is every option specs declares, valued from set, then
// from the declared default. A key of set that specs does not declare is an
// error, as is a value that is not of its type or a bad declaration.
// (core/plugin/host's ResolveOptions adds the settings a profile implies
// and the plugin's name to the errors.)
func resolveOptions(specs []OptionSpec, set map[string]string) (map[string]string, error) {
	if err := checkOptions(specs); err != nil {
		return nil, fmt.Errorf("bad option declaration: %w", err)
	}
	byName := map[string]OptionSpec{}
	for _, o := range specs {
		byName[o.Name] = o
	}
	for _, k := range slices.Sorted(maps.Keys(set)) {
		if _, ok := byName[k]; !ok {
			return nil, fmt.Errorf("unknown option %s (it takes %s)", k, optionNames(specs))
		}
	}
	out := make(map[string]string, len(specs))
	for _, o := range specs {
		v, ok := set[o.Name]
		if !ok {
			v = o.Default
		}
		if err := o.Check(v); err != nil {
			return nil, err
		}
		out[o.Name] = v
	}
	return out, nil
}

// optionNames lists the declared names for a message: "a, b" or "no
// options".
func optionNames(specs []OptionSpec) string {
	if len(specs) == 0 {
		return "no options"
	}
	names := make([]string, len(specs))
	for i, o := range specs {
		names[i] = o.Name
	}
	return strings.Join(names, ", ")
}

// OptionValues are a plugin's options checked against its declaration,
// defaults filled in. A plugin reads them in Open with the typed getters,
// which cannot fail on a declared option.
type OptionValues map[string]string

// ParseOptions checks m (OpenRequest.Options) against specs and fills in
// defaults. The host has done the same before Open; a plugin calls it so
// that a direct caller (its own tests, plugintest) gets the same checks.
func ParseOptions(specs []OptionSpec, m map[string]string) (OptionValues, error) {
	v, err := resolveOptions(specs, m)
	return OptionValues(v), err
}

// String is the value of option name.
func (v OptionValues) String(name string) string { return v[name] }

// Int is the value of an OptionInt option (0 if it is not one).
func (v OptionValues) Int(name string) int {
	n, _ := strconv.Atoi(v[name])
	return n
}

// Float is the value of an OptionFloat option (0 if it is not one).
func (v OptionValues) Float(name string) float64 {
	f, _ := strconv.ParseFloat(v[name], 64)
	return f
}

// Bool is the value of an OptionBool option (false if it is not one).
func (v OptionValues) Bool(name string) bool {
	b, _ := strconv.ParseBool(v[name])
	return b
}

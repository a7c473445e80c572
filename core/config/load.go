package config

import (
	"fmt"
	"os"
	"reflect"
	"sort"
	"strings"
	"time"

	"github.com/go-viper/mapstructure/v2"
	"github.com/knadh/koanf/parsers/yaml"
	"github.com/knadh/koanf/providers/confmap"
	"github.com/knadh/koanf/providers/env/v2"
	"github.com/knadh/koanf/providers/file"
	"github.com/knadh/koanf/v2"
)

// Options says where a profile comes from.
type Options struct {
	// Profile is a YAML file path, "auto" (derive from the machine) or ""
	// (same as auto).
	Profile string
	// ModelPath lets auto detection look at the storage the model is on.
	ModelPath string
	// Environ supplies the environment (os.Environ when nil); only K3_*
	// variables that name a profile key are read.
	Environ []string
	// Flags holds the command-line settings that were actually set, keyed
	// by profile key ("threads", "memory.budget", "server.port", ...).
	Flags map[string]any
	// Machine overrides hardware detection (tests); nil means Detect().
	Machine *Machine
}

// Load builds a profile in layers: defaults (or auto-detected settings),
// then the profile file, then K3_* environment variables, then flags that
// were set. Unknown keys in any layer are errors that name the key.
func Load(o Options) (*Profile, error) {
	k := koanf.New(".")
	var set []string // keys set by a file, the environment or flags

	base := Defaults()
	var budgetHow, probe string
	if o.Profile == "" || o.Profile == "auto" {
		m := o.Machine
		if m == nil {
			d := Detect(o.ModelPath)
			if o.ModelPath != "" {
				// Cached per device: a second or two once a week.
				d.Probe, _ = CachedProbe(o.ModelPath, "", 1500*time.Millisecond)
			}
			m = &d
		}
		base = Auto(*m)
		_, budgetHow = AutoBudget(*m)
		if m.Probe != nil {
			probe = m.Probe.String()
		}
	}
	if err := k.Load(confmap.Provider(toMap(base), "."), nil); err != nil {
		return nil, fmt.Errorf("config: defaults: %w", err)
	}

	if o.Profile != "" && o.Profile != "auto" {
		if _, err := os.Stat(o.Profile); err != nil {
			return nil, fmt.Errorf("config: profile %s: %w", o.Profile, err)
		}
		fk := koanf.New(".")
		if err := fk.Load(file.Provider(o.Profile), yaml.Parser()); err != nil {
			return nil, fmt.Errorf("config: profile %s: %w", o.Profile, err)
		}
		if err := checkKeys(fk, o.Profile); err != nil {
			return nil, err
		}
		if err := k.Merge(fk); err != nil {
			return nil, fmt.Errorf("config: profile %s: %w", o.Profile, err)
		}
		set = append(set, fk.Keys()...)
	}

	environ := o.Environ
	if environ == nil {
		environ = os.Environ()
	}
	ek := koanf.New(".")
	err := ek.Load(env.Provider(".", env.Opt{
		Prefix:      "K3_",
		EnvironFunc: func() []string { return environ },
		TransformFunc: func(name, v string) (string, any) {
			key := envKey(name)
			if !isKnown(key) {
				return "", nil // K3_PARITY and friends are not profile keys
			}
			return key, v
		},
	}), nil)
	if err != nil {
		return nil, fmt.Errorf("config: environment: %w", err)
	}
	if err := k.Merge(ek); err != nil {
		return nil, fmt.Errorf("config: environment: %w", err)
	}
	set = append(set, ek.Keys()...)

	if len(o.Flags) > 0 {
		fk := koanf.New(".")
		if err := fk.Load(confmap.Provider(o.Flags, "."), nil); err != nil {
			return nil, fmt.Errorf("config: flags: %w", err)
		}
		if err := checkKeys(fk, "flags"); err != nil {
			return nil, err
		}
		if err := k.Merge(fk); err != nil {
			return nil, fmt.Errorf("config: flags: %w", err)
		}
		set = append(set, fk.Keys()...)
	}

	var p Profile
	if err := unmarshal(k, &p); err != nil {
		return nil, err
	}
	// llama.cpp clamps the physical batch to the logical one
	// (n_ubatch = min(n_batch, n_ubatch)), so "-b 32" alone starts.
	p.UBatch = min(p.UBatch, p.Batch)
	if err := p.Validate(); err != nil {
		return nil, err
	}
	p.set = map[string]bool{}
	for _, key := range set {
		p.set[key] = true
	}
	if budgetHow != "" && !p.set["memory.budget"] {
		p.detected = append(p.detected, "budget: "+budgetHow)
	}
	if probe != "" {
		p.detected = append(p.detected, "storage: "+probe)
	}
	if p.Threads == 0 {
		// "one per physical core", as the profiles promise: the Go
		// default would be one per logical CPU (SMT siblings share a
		// core's vector units, which the kernels keep busy).
		m := o.Machine
		if m == nil {
			d := Detect("")
			m = &d
		}
		p.Threads = m.PhysicalCores
	}
	return &p, nil
}

// envKey maps K3_STAGER__IO_WORKERS to stager.io_workers: a double
// underscore separates levels, since single ones appear inside key names.
func envKey(name string) string {
	s := strings.ToLower(strings.TrimPrefix(name, "K3_"))
	return strings.ReplaceAll(s, "__", ".")
}

func checkKeys(k *koanf.Koanf, source string) error {
	var bad []string
	for _, key := range k.Keys() {
		if !isKnown(key) {
			bad = append(bad, key)
		}
	}
	if len(bad) > 0 {
		sort.Strings(bad)
		return fmt.Errorf("config: %s: unknown key %s (known keys: %s)", source, strings.Join(bad, ", "), strings.Join(KnownKeys(), ", "))
	}
	return nil
}

func unmarshal(k *koanf.Koanf, p *Profile) error {
	return k.UnmarshalWithConf("", p, koanf.UnmarshalConf{
		Tag: "koanf",
		DecoderConfig: &mapstructure.DecoderConfig{
			Result:           p,
			TagName:          "koanf",
			ErrorUnused:      true,
			WeaklyTypedInput: true,
			DecodeHook:       mapstructure.ComposeDecodeHookFunc(sizeHook, listHook, durationHook),
		},
	})
}

// listHook reads a string given for a list (a flag, an environment
// variable) as comma-separated items.
func listHook(from, to reflect.Type, data any) (any, error) {
	s, ok := data.(string)
	if !ok || to.Kind() != reflect.Slice || to.Elem().Kind() != reflect.String {
		return data, nil
	}
	var out []string
	for _, item := range strings.Split(s, ",") {
		if item = strings.TrimSpace(item); item != "" {
			out = append(out, item)
		}
	}
	return out, nil
}

func sizeHook(from, to reflect.Type, data any) (any, error) {
	if to != reflect.TypeOf(Size(0)) {
		return data, nil
	}
	switch v := data.(type) {
	case string:
		return ParseSize(v)
	case int:
		return Size(v), nil
	case int64:
		return Size(v), nil
	case uint64:
		return Size(v), nil
	case float64:
		return Size(v), nil
	case Size:
		return v, nil
	}
	return data, nil
}

// durationHook reads a duration as Go writes it ("10s", "1m30s"). A bare
// number other than 0 is refused: "10" would otherwise be 10 nanoseconds.
func durationHook(from, to reflect.Type, data any) (any, error) {
	if to != reflect.TypeOf(time.Duration(0)) || from == to {
		return data, nil
	}
	switch v := data.(type) {
	case string:
		d, err := time.ParseDuration(v)
		if err != nil {
			return nil, fmt.Errorf("%q is not a duration such as 10s or 1m30s", v)
		}
		return d, nil
	case int, int64, uint64, float64:
		if reflect.ValueOf(v).IsZero() {
			return time.Duration(0), nil
		}
		return nil, fmt.Errorf("%v is not a duration: write its unit, e.g. %vs", v, v)
	}
	return data, nil
}

// KnownKeys lists every profile key in dotted form.
func KnownKeys() []string {
	var keys []string
	walkKeys(reflect.TypeOf(Profile{}), "", func(k string) { keys = append(keys, k) })
	sort.Strings(keys)
	return keys
}

// isKnown reports whether key is a profile key or lies under a map one
// (stager.options.warm).
func isKnown(key string) bool {
	known := knownKeys()
	if known[key] {
		return true
	}
	for _, m := range mapKeys {
		if strings.HasPrefix(key, m+".") {
			return true
		}
	}
	return false
}

// mapKeys are the profile keys whose value is a map of free keys.
var mapKeys = []string{"stager.options"}

func knownKeys() map[string]bool {
	m := map[string]bool{}
	for _, k := range KnownKeys() {
		m[k] = true
	}
	return m
}

func walkKeys(t reflect.Type, prefix string, f func(string)) {
	for i := 0; i < t.NumField(); i++ {
		fl := t.Field(i)
		name := fl.Tag.Get("koanf")
		if name == "" {
			continue
		}
		if fl.Type.Kind() == reflect.Struct {
			walkKeys(fl.Type, prefix+name+".", f)
			continue
		}
		f(prefix + name)
	}
}

// toMap flattens a profile to koanf keys so it can be the base layer.
func toMap(p Profile) map[string]any {
	m := map[string]any{}
	var walk func(v reflect.Value, prefix string)
	walk = func(v reflect.Value, prefix string) {
		t := v.Type()
		for i := 0; i < t.NumField(); i++ {
			name := t.Field(i).Tag.Get("koanf")
			if name == "" {
				continue
			}
			fv := v.Field(i)
			if fv.Kind() == reflect.Map && fv.Len() == 0 {
				continue
			}
			if fv.Kind() == reflect.Struct {
				walk(fv, prefix+name+".")
				continue
			}
			m[prefix+name] = fv.Interface()
		}
	}
	walk(reflect.ValueOf(p), "")
	return m
}

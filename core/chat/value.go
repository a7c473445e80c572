package chat

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"unicode/utf8"

	"github.com/ardanlabs/jinja"
)

// maxJSONDepth bounds nesting of request JSON turned into template values, so a
// hostile request cannot exhaust the stack.
const maxJSONDepth = 256

// valueFromJSON decodes one JSON document into a template value, keeping the
// order of object keys: llama.cpp hands templates an ordered_json, and
// templates that iterate a mapping (tool-call arguments, schemas) print its keys
// in that order.
func valueFromJSON(data []byte) (jinja.Value, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	v, err := decodeValue(dec, 0)
	if err != nil {
		return jinja.Undefined(), err
	}
	if _, err := dec.Token(); err != io.EOF {
		return jinja.Undefined(), errors.New("trailing data after JSON value")
	}
	return v, nil
}

func decodeValue(dec *json.Decoder, depth int) (jinja.Value, error) {
	if depth > maxJSONDepth {
		return jinja.Undefined(), fmt.Errorf("JSON nested deeper than %d", maxJSONDepth)
	}
	tok, err := dec.Token()
	if err != nil {
		return jinja.Undefined(), err
	}
	switch t := tok.(type) {
	case json.Delim:
		switch t {
		case '[':
			var items []jinja.Value
			for dec.More() {
				v, err := decodeValue(dec, depth+1)
				if err != nil {
					return jinja.Undefined(), err
				}
				items = append(items, v)
			}
			if _, err := dec.Token(); err != nil {
				return jinja.Undefined(), err
			}
			if items == nil {
				items = []jinja.Value{}
			}
			return jinja.NewList(items), nil
		case '{':
			d := jinja.NewDict()
			for dec.More() {
				kt, err := dec.Token()
				if err != nil {
					return jinja.Undefined(), err
				}
				key, ok := kt.(string)
				if !ok {
					return jinja.Undefined(), fmt.Errorf("object key %v is not a string", kt)
				}
				v, err := decodeValue(dec, depth+1)
				if err != nil {
					return jinja.Undefined(), err
				}
				d.AsDict().Set(key, v)
			}
			if _, err := dec.Token(); err != nil {
				return jinja.Undefined(), err
			}
			return d, nil
		}
		return jinja.Undefined(), fmt.Errorf("unexpected delimiter %v", t)
	default:
		return jinja.FromGoValue(t), nil
	}
}

// extraFilters are filters llama.cpp's Jinja engine has and the Go engine
// lacks. The engine looks a filter it does not know up in the render scope, so
// they travel with the template variables.
func extraFilters() map[string]jinja.Value {
	return map[string]jinja.Value{
		"truncate": jinja.NewCallable("truncate", filterTruncate),
		"format":   jinja.NewCallable("format", filterFormat),
	}
}

// filterTruncate follows Jinja's truncate(s, length=255, killwords=False,
// end='...', leeway=5), which llama.cpp implements the same way.
func filterTruncate(args []jinja.Value, kwargs map[string]jinja.Value) (jinja.Value, error) {
	if len(args) == 0 || !args[0].IsString() {
		return jinja.Undefined(), errors.New("truncate: expects a string")
	}
	s := args[0].AsString()
	length, killwords, end, leeway := 255, false, "...", 5
	arg := func(i int, name string) (jinja.Value, bool) {
		if v, ok := kwargs[name]; ok {
			return v, true
		}
		if i < len(args) {
			return args[i], true
		}
		return jinja.Undefined(), false
	}
	if v, ok := arg(1, "length"); ok && v.IsInt() {
		length = int(v.AsInt())
	}
	if v, ok := arg(2, "killwords"); ok {
		killwords = v.IsTruthy()
	}
	if v, ok := arg(3, "end"); ok && v.IsString() {
		end = v.AsString()
	}
	if v, ok := arg(4, "leeway"); ok && v.IsInt() {
		leeway = int(v.AsInt())
	}
	runes := []rune(s)
	if len(runes) <= length+leeway {
		return jinja.NewString(s), nil
	}
	cut := max(length-utf8.RuneCountInString(end), 0)
	if killwords {
		return jinja.NewString(string(runes[:cut]) + end), nil
	}
	head := string(runes[:cut])
	if i := strings.LastIndexByte(head, ' '); i >= 0 {
		head = head[:i]
	}
	return jinja.NewString(head + end), nil
}

// filterFormat is Python's printf-style "fmt" % args for %s, %d, %i, %f and %%.
func filterFormat(args []jinja.Value, _ map[string]jinja.Value) (jinja.Value, error) {
	if len(args) == 0 || !args[0].IsString() {
		return jinja.Undefined(), errors.New("format: expects a format string")
	}
	format, rest := args[0].AsString(), args[1:]
	var b strings.Builder
	for i := 0; i < len(format); i++ {
		c := format[i]
		if c != '%' || i+1 >= len(format) {
			b.WriteByte(c)
			continue
		}
		i++
		verb := format[i]
		if verb == '%' {
			b.WriteByte('%')
			continue
		}
		if len(rest) == 0 {
			return jinja.Undefined(), errors.New("format: not enough arguments")
		}
		v := rest[0]
		rest = rest[1:]
		switch verb {
		case 's':
			b.WriteString(plain(v))
		case 'd', 'i':
			if !v.IsNumber() {
				return jinja.Undefined(), fmt.Errorf("format: %%%c needs a number", verb)
			}
			if v.IsInt() {
				fmt.Fprintf(&b, "%d", v.AsInt())
			} else {
				fmt.Fprintf(&b, "%d", int64(v.AsFloat()))
			}
		case 'f':
			switch {
			case v.IsInt():
				fmt.Fprintf(&b, "%f", float64(v.AsInt()))
			case v.IsFloat():
				fmt.Fprintf(&b, "%f", v.AsFloat())
			default:
				return jinja.Undefined(), errors.New("format: %f needs a number")
			}
		default:
			return jinja.Undefined(), fmt.Errorf("format: unsupported conversion %%%c", verb)
		}
	}
	return jinja.NewString(b.String()), nil
}

// plain prints a value the way {{ v }} does.
func plain(v jinja.Value) string {
	if v.IsString() {
		return v.AsString()
	}
	return v.String()
}

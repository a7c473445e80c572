package grammar

import (
	"encoding/json"
	"fmt"
	"math"
	"regexp"
	"slices"
	"strconv"
	"strings"
)

// The rules JSON values are built from, with llama.cpp's names and
// whitespace conventions (common/json-schema-to-grammar.cpp): optional
// space after an opener, a comma or a colon, and before a closer.
const spaceRule = `| " " | "\n"{1,2} [ \t]{0,20}`

type builtin struct {
	body string
	deps []string
}

var primitives = map[string]builtin{
	"boolean":       {`("true" | "false")`, nil},
	"decimal-part":  {`[0-9]{1,16}`, nil},
	"integral-part": {`[0] | [1-9] [0-9]{0,15}`, nil},
	"number":        {`("-"? integral-part) ("." decimal-part)? ([eE] [-+]? integral-part)?`, []string{"integral-part", "decimal-part"}},
	"integer":       {`("-"? integral-part)`, []string{"integral-part"}},
	"value":         {`object | array | string | number | boolean | null`, []string{"object", "array", "string", "number", "boolean", "null"}},
	"object":        {`"{" space ( string ":" space value ("," space string ":" space value)* )? space "}"`, []string{"string", "value"}},
	"array":         {`"[" space ( value ("," space value)* )? space "]"`, []string{"value"}},
	"uuid":          {`"\"" [0-9a-fA-F]{8} "-" [0-9a-fA-F]{4} "-" [0-9a-fA-F]{4} "-" [0-9a-fA-F]{4} "-" [0-9a-fA-F]{12} "\""`, nil},
	"char":          {`[^"\\\x7F\x00-\x1F] | [\\] (["\\bfnrt] | "u" [0-9a-fA-F]{4})`, nil},
	"string":        {`"\"" char* "\""`, []string{"char"}},
	"null":          {`"null"`, nil},
	// string formats
	"date":             {`[0-9]{4} "-" ( "0" [1-9] | "1" [0-2] ) "-" ( "0" [1-9] | [1-2] [0-9] | "3" [0-1] )`, nil},
	"time":             {`([01] [0-9] | "2" [0-3]) ":" [0-5] [0-9] ":" [0-5] [0-9] ( "." [0-9]{3} )? ( "Z" | ( "+" | "-" ) ( [01] [0-9] | "2" [0-3] ) ":" [0-5] [0-9] )`, nil},
	"date-time":        {`date "T" time`, []string{"date", "time"}},
	"date-string":      {`"\"" date "\""`, []string{"date"}},
	"time-string":      {`"\"" time "\""`, []string{"time"}},
	"date-time-string": {`"\"" date-time "\""`, []string{"date-time"}},
}

// unsupported are the keywords that constrain a value in ways a grammar
// here does not enforce: a schema using them is refused rather than
// answered with JSON that may not validate.
var unsupported = []string{"not", "if", "then", "else", "allOf", "dependentSchemas", "dependentRequired",
	"patternProperties", "propertyNames", "contains", "minContains", "maxContains", "multipleOf",
	"minProperties", "maxProperties", "unevaluatedProperties", "unevaluatedItems", "additionalItems", "pattern"}

// SchemaError is a JSON Schema that cannot become a grammar: invalid, or
// using what is not supported. Path is a JSON pointer into the schema.
type SchemaError struct {
	Path string
	Msg  string
}

func (e *SchemaError) Error() string {
	p := e.Path
	if p == "" {
		p = "/"
	}
	return fmt.Sprintf("json schema at %s: %s", p, e.Msg)
}

// SchemaBuilder collects the rules of one grammar made of JSON schemas
// and rules of the caller's (a tool call's syntax around its arguments).
type SchemaBuilder struct {
	rules map[string]string
	refs  map[string]string // "prefix\x00ref" -> rule name (resolved or being resolved)
	root  any               // the schema being added, for its $refs
	scope string
	own   map[string]bool // rules the caller added with Rule (may name rules not yet added)
}

// NewSchemaBuilder returns an empty builder.
func NewSchemaBuilder() *SchemaBuilder {
	return &SchemaBuilder{rules: map[string]string{"space": spaceRule}, refs: map[string]string{}}
}

// FromJSONSchema converts a JSON Schema into GBNF text whose root rule
// matches the JSON documents it describes.
func FromJSONSchema(schema []byte) (string, error) {
	b := NewSchemaBuilder()
	if _, err := b.Add("", schema); err != nil {
		return "", err
	}
	return b.String(), nil
}

// Add converts schema into rules named after name ("" makes it the root
// rule) and returns the name of the rule that matches its documents.
func (b *SchemaBuilder) Add(name string, schema []byte) (rule string, err error) {
	return b.AddAt(name, schema)
}

// AddAt is Add for the schema inside schema at the path of object keys
// (one property's schema: "properties", name), its $refs resolved in the
// whole document.
func (b *SchemaBuilder) AddAt(name string, schema []byte, path ...string) (rule string, err error) {
	v, err := decodeOrdered(schema)
	if err != nil {
		return "", &SchemaError{Msg: "not valid JSON: " + err.Error()}
	}
	target, at := v, ""
	for _, k := range path {
		at += "/" + strings.ReplaceAll(strings.ReplaceAll(k, "~", "~0"), "/", "~1")
		o, _ := target.(*object)
		if target, _ = o.get(k); target == nil {
			return "", &SchemaError{Path: at, Msg: "not found"}
		}
	}
	defer func() {
		if r := recover(); r != nil {
			e, ok := r.(*SchemaError)
			if !ok {
				panic(r)
			}
			rule, err = "", e
		}
	}()
	b.root, b.scope = v, name
	rule = b.visit(target, name, at)
	// A $ref that reaches itself before any character (`{"$ref":"#"}`, or
	// two definitions naming each other through anyOf) describes no finite
	// document; the grammar would be left-recursive. Say so here, as a
	// schema error, rather than hand the caller a grammar that cannot parse.
	if _, perr := Parse(b.schemaRules(), Options{Root: rule}); perr != nil {
		return "", &SchemaError{Msg: "its $refs form a cycle that matches no document: " + perr.Error()}
	}
	return rule, nil
}

// Rule adds a rule of the caller's, GBNF body text, and returns its name
// (name, or name with a number when another body has it).
func (b *SchemaBuilder) Rule(name, body string) string {
	n := b.add(name, body)
	if b.own == nil {
		b.own = map[string]bool{}
	}
	b.own[n] = true
	return n
}

// String is the grammar: every rule, sorted by name.
func (b *SchemaBuilder) String() string { return b.text(nil) }

// schemaRules is the grammar without the caller's rules, which may still
// name rules the caller adds later.
func (b *SchemaBuilder) schemaRules() string { return b.text(b.own) }

func (b *SchemaBuilder) text(skip map[string]bool) string {
	names := make([]string, 0, len(b.rules))
	for n := range b.rules {
		if !skip[n] {
			names = append(names, n)
		}
	}
	slices.Sort(names)
	var s strings.Builder
	for _, n := range names {
		s.WriteString(n + " ::= " + b.rules[n] + "\n")
	}
	return s.String()
}

var invalidRuleChars = regexp.MustCompile(`[^a-zA-Z0-9-]+`)

func (b *SchemaBuilder) add(name, body string) string {
	n := invalidRuleChars.ReplaceAllString(name, "-")
	if old, ok := b.rules[n]; !ok || old == body {
		b.rules[n] = body
		return n
	}
	for i := 0; ; i++ {
		k := n + strconv.Itoa(i)
		if old, ok := b.rules[k]; !ok || old == body {
			b.rules[k] = body
			return k
		}
	}
}

func (b *SchemaBuilder) primitive(name string, p builtin) string {
	n := b.add(name, p.body)
	for _, d := range p.deps {
		if _, ok := b.rules[d]; !ok {
			b.primitive(d, primitives[d])
		}
	}
	return n
}

func fail(path, format string, args ...any) {
	panic(&SchemaError{Path: path, Msg: fmt.Sprintf(format, args...)})
}

func sub(name, part string) string {
	if name == "" {
		return part
	}
	return name + "-" + part
}

func pointer(path string, keys ...string) string {
	for _, k := range keys {
		path += "/" + strings.ReplaceAll(strings.ReplaceAll(k, "~", "~0"), "/", "~1")
	}
	return path
}

// literal is GBNF for the exact text s.
func literal(s string) string {
	r := strings.NewReplacer("\r", `\r`, "\n", `\n`, `"`, `\"`, `\`, `\\`)
	return `"` + r.Replace(s) + `"`
}

func reserved(name string) bool {
	_, ok := primitives[name]
	return ok || name == "root"
}

// visit returns the name of a rule matching the documents schema s allows.
func (b *SchemaBuilder) visit(s any, name, path string) string {
	ruleName := name
	switch {
	case reserved(name):
		ruleName = name + "-"
	case name == "":
		ruleName = "root"
	}
	if s == true {
		return b.add(ruleName, b.primitive("value", primitives["value"]))
	}
	if s == false {
		fail(path, "the schema false allows no value")
	}
	o, ok := s.(*object)
	if !ok {
		fail(path, "a schema must be an object or a boolean")
	}
	for _, k := range unsupported {
		if _, ok := o.get(k); ok {
			fail(path, "%q is not supported for constrained output", k)
		}
	}
	if v, ok := o.get("uniqueItems"); ok && v == true {
		fail(path, `"uniqueItems" is not supported for constrained output`)
	}
	typ, hasType := o.get("type")

	if ref, ok := o.get("$ref"); ok {
		r, ok := ref.(string)
		if !ok {
			fail(pointer(path, "$ref"), "$ref must be a string")
		}
		return b.add(ruleName, b.resolveRef(r, pointer(path, "$ref")))
	}
	for _, kw := range []string{"oneOf", "anyOf"} {
		alts, ok := o.get(kw)
		if !ok {
			continue
		}
		list, ok := alts.([]any)
		if !ok || len(list) == 0 {
			fail(pointer(path, kw), "%s must be a non-empty array of schemas", kw)
		}
		for _, other := range []string{"properties", "items", "enum", "const", "oneOf", "anyOf"} {
			if _, ok := o.get(other); ok && other != kw {
				fail(path, "%s together with %q in one schema is not supported; move it into each alternative", kw, other)
			}
		}
		var rules []string
		for i, alt := range list {
			part := strconv.Itoa(i)
			if name == "" {
				part = "alternative-" + part
			}
			rules = append(rules, b.visit(alt, sub(name, part), pointer(path, kw, strconv.Itoa(i))))
		}
		return b.add(ruleName, strings.Join(rules, " | "))
	}
	if types, ok := typ.([]any); ok {
		if len(types) == 0 {
			fail(pointer(path, "type"), "type must not be an empty array")
		}
		var rules []string
		for i, t := range types {
			c := &object{keys: o.keys, vals: map[string]any{}}
			for k, v := range o.vals {
				c.vals[k] = v
			}
			c.vals["type"] = t
			rules = append(rules, b.visit(c, sub(name, strconv.Itoa(i)), path))
		}
		return b.add(ruleName, strings.Join(rules, " | "))
	}
	t := ""
	if hasType {
		var ok bool
		if t, ok = typ.(string); !ok {
			fail(pointer(path, "type"), "type must be a string or an array of strings")
		}
		switch t {
		case "object", "array", "string", "number", "integer", "boolean", "null":
		default:
			fail(pointer(path, "type"), "unknown type %q (want object, array, string, number, integer, boolean or null)", t)
		}
	}
	if c, ok := o.get("const"); ok {
		return b.add(ruleName, literal(encodeCompact(c)))
	}
	if e, ok := o.get("enum"); ok {
		list, ok := e.([]any)
		if !ok || len(list) == 0 {
			fail(pointer(path, "enum"), "enum must be a non-empty array")
		}
		var alts []string
		for _, v := range list {
			alts = append(alts, literal(encodeCompact(v)))
		}
		return b.add(ruleName, "("+strings.Join(alts, " | ")+")")
	}
	if t != "number" && t != "integer" {
		for _, k := range []string{"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"} {
			if _, ok := o.get(k); ok && t != "" {
				fail(pointer(path, k), "%s applies to numbers, not to type %q", k, t)
			}
		}
	}
	_, hasProps := o.get("properties")
	addl, hasAddl := o.get("additionalProperties")
	if (t == "" || t == "object") && (hasProps || (hasAddl && addl != true)) {
		return b.add(ruleName, b.object(o, name, path))
	}
	_, hasItems := o.get("items")
	_, hasPrefix := o.get("prefixItems")
	if t == "array" || (t == "" && (hasItems || hasPrefix)) {
		return b.add(ruleName, b.array(o, name, path))
	}
	if t == "string" || t == "" {
		if f, ok := o.get("format"); ok {
			fs, _ := f.(string)
			if regexp.MustCompile(`^uuid[1-5]?$`).MatchString(fs) {
				if ruleName == "root" {
					return b.primitive("root", primitives["uuid"])
				}
				return b.primitive(fs, primitives["uuid"])
			}
			if p, ok := primitives[fs+"-string"]; ok {
				return b.add(ruleName, b.primitive(fs+"-string", p))
			}
		}
	}
	if t == "string" {
		lo, hasLo := count(o, "minLength", path)
		hi, hasHi := count(o, "maxLength", path)
		if hasLo || hasHi {
			if !hasHi {
				hi = -1
			} else if hi < lo {
				fail(path, "maxLength %d is below minLength %d", hi, lo)
			}
			char := b.primitive("char", primitives["char"])
			return b.add(ruleName, `"\"" `+repetition(char, lo, hi, "")+` "\""`)
		}
	}
	if t == "integer" || t == "number" {
		if r, ok := b.numberRange(o, t, path); ok {
			return b.add(ruleName, r)
		}
	}
	if t == "" || t == "object" {
		if t == "object" || len(o.keys) == 0 {
			return b.add(ruleName, b.primitive("object", primitives["object"]))
		}
		return b.add(ruleName, b.primitive("value", primitives["value"]))
	}
	if ruleName == "root" {
		return b.primitive("root", primitives[t])
	}
	return b.primitive(t, primitives[t])
}

// count reads a non-negative integer keyword.
func count(o *object, k, path string) (int, bool) {
	v, ok := o.get(k)
	if !ok {
		return 0, false
	}
	n, isNum := v.(json.Number)
	i, err := n.Int64()
	if !isNum || err != nil || i < 0 || i > math.MaxInt32 {
		fail(pointer(path, k), "%s must be a non-negative integer", k)
	}
	return int(i), true
}

// repetition is item repeated lo to hi times (hi < 0: no maximum), with
// sep between items.
func repetition(item string, lo, hi int, sep string) string {
	if hi == 0 {
		return ""
	}
	if lo == 0 && hi == 1 {
		return item + "?"
	}
	if sep == "" {
		switch {
		case lo == 1 && hi < 0:
			return item + "+"
		case lo == 0 && hi < 0:
			return item + "*"
		case hi < 0:
			return fmt.Sprintf("%s{%d,}", item, lo)
		}
		return fmt.Sprintf("%s{%d,%d}", item, lo, hi)
	}
	restHi := hi
	if hi > 0 {
		restHi = hi - 1
	}
	out := item + " " + repetition("("+sep+" "+item+")", max(lo-1, 0), restHi, "")
	if lo == 0 {
		out = "(" + out + ")?"
	}
	return out
}

func (b *SchemaBuilder) resolveRef(ref, path string) string {
	frag, ok := strings.CutPrefix(ref, "#")
	if !ok {
		fail(path, "$ref %q is not supported: only references into this schema (#/...) are", ref)
	}
	key := b.scope + "\x00" + ref
	if n, ok := b.refs[key]; ok {
		return n
	}
	target := b.root
	if frag != "" {
		if !strings.HasPrefix(frag, "/") {
			fail(path, "$ref %q is not a JSON pointer", ref)
		}
		for _, tok := range strings.Split(frag[1:], "/") {
			tok = strings.ReplaceAll(strings.ReplaceAll(tok, "~1", "/"), "~0", "~")
			switch x := target.(type) {
			case *object:
				v, ok := x.get(tok)
				if !ok {
					fail(path, "$ref %q: %q not found", ref, tok)
				}
				target = v
			case []any:
				i, err := strconv.Atoi(tok)
				if err != nil || i < 0 || i >= len(x) {
					fail(path, "$ref %q: index %q out of range", ref, tok)
				}
				target = x[i]
			default:
				fail(path, "$ref %q: %q not found", ref, tok)
			}
		}
	}
	name := sub(b.scope, "ref"+invalidRuleChars.ReplaceAllString(frag, "-"))
	name = invalidRuleChars.ReplaceAllString(name, "-")
	// Reserve the name first: a recursive schema refers to itself.
	if _, taken := b.rules[name]; taken {
		for i := 0; ; i++ {
			if _, taken := b.rules[name+strconv.Itoa(i)]; !taken {
				name += strconv.Itoa(i)
				break
			}
		}
	}
	b.refs[key] = name
	got := b.visit(target, name, "#"+frag)
	if got != name {
		b.rules[name] = got
	}
	return name
}

func (b *SchemaBuilder) object(o *object, name, path string) string {
	var props []string
	kv := map[string]string{}
	if p, ok := o.get("properties"); ok {
		po, ok := p.(*object)
		if !ok {
			fail(pointer(path, "properties"), "properties must be an object")
		}
		for _, k := range po.keys {
			value := b.visit(po.vals[k], sub(name, k), pointer(path, "properties", k))
			kb, _ := json.Marshal(k)
			kv[k] = b.add(sub(name, k)+"-kv", literal(string(kb))+` space ":" space `+value)
			props = append(props, k)
		}
	}
	required := map[string]bool{}
	if r, ok := o.get("required"); ok {
		list, ok := r.([]any)
		if !ok {
			fail(pointer(path, "required"), "required must be an array of property names")
		}
		for _, x := range list {
			s, ok := x.(string)
			if !ok {
				fail(pointer(path, "required"), "required must be an array of property names")
			}
			if _, ok := kv[s]; !ok {
				fail(pointer(path, "required"), "required property %q is not among the properties", s)
			}
			required[s] = true
		}
	}
	var req, opt []string
	for _, k := range props {
		if required[k] {
			req = append(req, k)
		} else {
			opt = append(opt, k)
		}
	}
	addl, _ := o.get("additionalProperties")
	if _, isObj := addl.(*object); addl == true || isObj {
		subName := sub(name, "additional")
		var value string
		if isObj {
			value = b.visit(addl, subName+"-value", pointer(path, "additionalProperties"))
		} else {
			value = b.primitive("value", primitives["value"])
		}
		key := b.primitive("string", primitives["string"])
		if len(props) > 0 {
			key = b.add(subName+"-k", b.notStrings(props))
		}
		kv["*"] = b.add(subName+"-kv", key+` ":" space `+value)
		opt = append(opt, "*")
	} else if addl != nil && addl != false {
		fail(pointer(path, "additionalProperties"), "additionalProperties must be a boolean or a schema")
	}
	if len(req) == 0 && len(opt) == 0 {
		return `"{" space "}"`
	}
	var r strings.Builder
	r.WriteString(`"{" space `)
	for i, k := range req {
		if i > 0 {
			r.WriteString(` "," space `)
		}
		r.WriteString(kv[k])
	}
	if len(opt) > 0 {
		r.WriteString(" (")
		if len(req) > 0 {
			r.WriteString(` "," space ( `)
		}
		// Optional properties come in order, each present or not: one
		// alternative per first present one, then a chain of -rest rules.
		var rest func(ks []string, firstOptional bool) string
		rest = func(ks []string, firstOptional bool) string {
			if len(ks) == 0 {
				return ""
			}
			k := ks[0]
			comma := `( "," space ` + kv[k] + ` )`
			var s string
			switch {
			case firstOptional && k == "*":
				s = comma + "*"
			case firstOptional:
				s = comma + "?"
			case k == "*":
				s = kv[k] + " " + comma + "*"
			default:
				s = kv[k]
			}
			if len(ks) > 1 {
				s += " " + b.add(sub(name, k)+"-rest", rest(ks[1:], true))
			}
			return s
		}
		for i := range opt {
			if i > 0 {
				r.WriteString(" | ")
			}
			r.WriteString(rest(opt[i:], false))
		}
		if len(req) > 0 {
			r.WriteString(" )")
		}
		r.WriteString(" )?")
	}
	r.WriteString(` space "}"`)
	return r.String()
}

// notStrings matches a JSON string that is none of ss (keys other than
// the declared properties), through a trie of them.
func (b *SchemaBuilder) notStrings(ss []string) string {
	type trie struct {
		kids map[byte]*trie
		keys []byte
		end  bool
	}
	root := &trie{kids: map[byte]*trie{}}
	for _, s := range ss {
		n := root
		for i := 0; i < len(s); i++ {
			c := s[i]
			k, ok := n.kids[c]
			if !ok {
				k = &trie{kids: map[byte]*trie{}}
				n.kids[c] = k
				n.keys = append(n.keys, c)
			}
			n = k
		}
		n.end = true
	}
	char := b.primitive("char", primitives["char"])
	var out strings.Builder
	out.WriteString(`["] ( `)
	var visit func(n *trie)
	visit = func(n *trie) {
		keys := slices.Sorted(slices.Values(n.keys))
		var rejects strings.Builder
		for i, c := range keys {
			rejects.WriteString(classChar(rune(c)))
			if i > 0 {
				out.WriteString(" | ")
			}
			out.WriteString("[" + classChar(rune(c)) + "]")
			k := n.kids[c]
			if len(k.kids) > 0 {
				out.WriteString(" (")
				visit(k)
				out.WriteString(")")
			} else if k.end {
				out.WriteString(" " + char + "+")
			}
		}
		if len(keys) > 0 {
			out.WriteString(` | [^"` + rejects.String() + "] " + char + "*")
		}
	}
	visit(root)
	out.WriteString(" )")
	if !root.end {
		out.WriteString("?")
	}
	out.WriteString(` ["]`)
	return out.String()
}

func (b *SchemaBuilder) array(o *object, name, path string) string {
	items, hasItems := o.get("items")
	prefix, hasPrefix := o.get("prefixItems")
	if hasPrefix {
		if hasItems && items != false {
			fail(path, "prefixItems with items is not supported")
		}
		items, hasItems = prefix, true
	}
	if tuple, ok := items.([]any); ok {
		var r strings.Builder
		r.WriteString(`"[" space `)
		for i, it := range tuple {
			if i > 0 {
				r.WriteString(` "," space `)
			}
			r.WriteString(b.visit(it, sub(name, "tuple-"+strconv.Itoa(i)), pointer(path, "items", strconv.Itoa(i))))
		}
		r.WriteString(` space "]"`)
		return r.String()
	}
	if !hasItems {
		items = true
	}
	item := b.visit(items, sub(name, "item"), pointer(path, "items"))
	lo, _ := count(o, "minItems", path)
	hi, hasHi := count(o, "maxItems", path)
	if !hasHi {
		hi = -1
	} else if hi < lo {
		fail(path, "maxItems %d is below minItems %d", hi, lo)
	}
	return `"[" space ` + repetition(item, lo, hi, `"," space`) + ` space "]"`
}

package grammar

import (
	"errors"
	"math/rand/v2"
	"strconv"
	"strings"
	"testing"

	"github.com/santhosh-tekuri/jsonschema/v6"
)

// compileSchema compiles a schema with a real JSON Schema validator (the
// oracle: what the grammar generates must validate).
func compileSchema(t testing.TB, schema string) *jsonschema.Schema {
	t.Helper()
	doc, err := jsonschema.UnmarshalJSON(strings.NewReader(schema))
	if err != nil {
		t.Fatal(err)
	}
	c := jsonschema.NewCompiler()
	if err := c.AddResource("mem:///schema.json", doc); err != nil {
		t.Fatal(err)
	}
	s, err := c.Compile("mem:///schema.json")
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func validates(s *jsonschema.Schema, doc string) error {
	inst, err := jsonschema.UnmarshalJSON(strings.NewReader(doc))
	if err != nil {
		return err
	}
	return s.Validate(inst)
}

// randomDoc walks g with random allowed tokens of v until it may end.
func randomDoc(m *Matcher, v *Vocab, rng *rand.Rand, limit int) (string, bool) {
	var out strings.Builder
	for out.Len() < limit {
		if m.Done() && rng.IntN(4) == 0 {
			return out.String(), true
		}
		a := m.Allowed()
		var cands []int32
		for id := range int32(v.Size()) {
			if a.Has(id) && !v.IsEOG(id) {
				cands = append(cands, id)
			}
		}
		if len(cands) == 0 {
			return out.String(), m.Done()
		}
		// Favour structure: closing tokens come more often than they would.
		tok := cands[rng.IntN(len(cands))]
		for _, c := range cands {
			if p := string(v.Piece(c)); (p == `"` || p == "]" || p == "}") && rng.IntN(3) == 0 {
				tok = c
			}
		}
		if err := m.Accept(tok); err != nil {
			return "", false
		}
		out.Write(v.Piece(tok))
	}
	return "", false
}

func byteVocab() *Vocab {
	var p []string
	for b := 0x20; b < 0x7f; b++ {
		p = append(p, string(rune(b)))
	}
	p = append(p, "\n", "é", "日本", "true", "null", "false", `":`, `", "`, "</s>")
	return NewVocab(p, []int32{int32(len(p) - 1)})
}

var schemaCases = []struct {
	name, schema string
}{
	{"nested", `{"type":"object","properties":{
		"name":{"type":"string","minLength":1,"maxLength":12},
		"age":{"type":"integer","minimum":0,"maximum":150},
		"tags":{"type":"array","items":{"enum":["a","b",3,null]},"minItems":1,"maxItems":3},
		"address":{"type":"object","properties":{"city":{"type":"string","maxLength":8},"zip":{"type":["string","null"],"maxLength":5}},"required":["city"]},
		"ok":{"type":"boolean"},
		"kind":{"const":"person"}
	},"required":["name","age","address","kind"],"additionalProperties":false}`},
	{"defs and refs", `{"$defs":{"pt":{"type":"object","properties":{"x":{"type":"number"},"y":{"type":"integer","exclusiveMinimum":-5,"exclusiveMaximum":5}},"required":["x","y"]}},
		"type":"object","properties":{"a":{"$ref":"#/$defs/pt"},"b":{"type":"array","items":{"$ref":"#/$defs/pt"},"maxItems":2}},"required":["a"]}`},
	{"definitions", `{"definitions":{"s":{"type":"string","maxLength":4}},"type":"array","items":{"$ref":"#/definitions/s"},"minItems":2,"maxItems":4}`},
	{"anyOf oneOf", `{"type":"object","properties":{"v":{"anyOf":[{"type":"integer","minimum":10,"maximum":12},{"type":"string","maxLength":3}]},"w":{"oneOf":[{"type":"null"},{"type":"boolean"}]}},"required":["v","w"]}`},
	{"additional properties", `{"type":"object","properties":{"id":{"type":"integer","minimum":-3}},"required":["id"],"additionalProperties":{"type":"integer","maximum":7}}`},
	{"free object", `{"type":"object","properties":{"x":{"type":"string","maxLength":3}},"additionalProperties":true}`},
	{"recursive", `{"$defs":{"node":{"type":"object","properties":{"v":{"type":"integer","minimum":0,"maximum":9},"kids":{"type":"array","items":{"$ref":"#/$defs/node"},"maxItems":2}},"required":["v"]}},"$ref":"#/$defs/node"}`},
	{"formats", `{"type":"object","properties":{"d":{"type":"string","format":"date"},"u":{"type":"string","format":"uuid"},"t":{"type":"string","format":"date-time"}},"required":["d","u","t"]}`},
	{"tuple", `{"type":"array","prefixItems":[{"type":"integer","minimum":100,"maximum":2050},{"type":"string","maxLength":2}],"items":false}`},
	{"optional only", `{"type":"object","properties":{"a":{"type":"boolean"},"b":{"type":"null"},"c":{"type":"integer","maximum":-20}}}`},
	{"empty", `{}`},
}

func TestSchemaGeneratesValidDocuments(t *testing.T) {
	v := byteVocab()
	for _, tc := range schemaCases {
		t.Run(tc.name, func(t *testing.T) {
			src, err := FromJSONSchema([]byte(tc.schema))
			if err != nil {
				t.Fatal(err)
			}
			g, err := Parse(src, Options{})
			if err != nil {
				t.Fatalf("%v\n%s", err, src)
			}
			val := compileSchema(t, tc.schema)
			rng := rand.New(rand.NewPCG(7, 9))
			made := 0
			for range 60 {
				doc, ok := randomDoc(NewMatcher(g, v), v, rng, 3000)
				if !ok {
					continue
				}
				made++
				if err := validates(val, doc); err != nil {
					t.Fatalf("generated %s\nwhich does not validate: %v\ngrammar:\n%s", doc, err, src)
				}
			}
			if made < 20 {
				t.Fatalf("only %d of 60 random walks ended", made)
			}
		})
	}
}

func TestSchemaRejects(t *testing.T) {
	for _, tc := range []struct{ schema, doc string }{
		{schemaCases[0].schema, `{"name":"x","age":3,"kind":"person"}`},                                  // address missing
		{schemaCases[0].schema, `{"name":"x","age":151,"address":{"city":"a"},"kind":"person"}`},         // age > max
		{schemaCases[0].schema, `{"name":"","age":1,"address":{"city":"a"},"kind":"person"}`},            // minLength
		{schemaCases[0].schema, `{"name":"x","age":1,"address":{"city":"a"},"kind":"person","extra":1}`}, // additional
		{schemaCases[0].schema, `{"age":1,"name":"x","address":{"city":"a"},"kind":"person"}`},           // order
		{schemaCases[1].schema, `{"a":{"x":1,"y":5}}`},                                                   // exclusiveMaximum
		{schemaCases[4].schema, `{"id":1,"id":2}`},                                                       // a declared key as an extra
		{schemaCases[8].schema, `[99,"a"]`},                                                              // minimum 100
	} {
		src, err := FromJSONSchema([]byte(tc.schema))
		if err != nil {
			t.Fatal(err)
		}
		if matches(mustParse(t, src), tc.doc) {
			t.Errorf("%s matches the grammar of %s", tc.doc, tc.schema)
		}
	}
	ok := `{"name":"x","age":150,"address":{"city":"a","zip":null},"kind":"person", "ok": true}`
	src, _ := FromJSONSchema([]byte(schemaCases[0].schema))
	if !matches(mustParse(t, src), ok) {
		t.Errorf("%s does not match:\n%s", ok, src)
	}
}

func TestIntegerRanges(t *testing.T) {
	for _, r := range [][2]int64{{0, 0}, {0, 9}, {3, 27}, {-15, 7}, {-300, -20}, {99, 101}, {1, 1000}, {123, 4567}} {
		schema := `{"type":"integer","minimum":` + itoa(r[0]) + `,"maximum":` + itoa(r[1]) + `}`
		src, err := FromJSONSchema([]byte(schema))
		if err != nil {
			t.Fatal(err)
		}
		g := mustParse(t, src)
		for n := r[0] - 30; n <= r[1]+30; n++ {
			if want := n >= r[0] && n <= r[1]; matches(g, itoa(n)) != want {
				t.Errorf("[%d, %d]: %d matches = %v\n%s", r[0], r[1], n, !want, src)
			}
		}
		if matches(g, "0"+itoa(r[1])) && r[1] > 0 {
			t.Errorf("[%d, %d]: a leading zero matches", r[0], r[1])
		}
	}
	g := mustParse(t, must(FromJSONSchema([]byte(`{"type":"integer","minimum":42}`))))
	for _, s := range []string{"42", "43", "100", "999999999"} {
		if !matches(g, s) {
			t.Errorf("minimum 42: %s does not match", s)
		}
	}
	for _, s := range []string{"41", "0", "-1", "042"} {
		if matches(g, s) {
			t.Errorf("minimum 42: %s matches", s)
		}
	}
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }

func must(s string, err error) string {
	if err != nil {
		panic(err)
	}
	return s
}

func TestSchemaErrors(t *testing.T) {
	for _, tc := range []struct{ schema, want string }{
		{`{"type":"strin"}`, `unknown type "strin"`},
		{`[1]`, `must be an object or a boolean`},
		{`{"type":"object","properties":{"a":{"not":{}}}}`, `/properties/a: "not" is not supported`},
		{`{"type":"string","pattern":"^a$"}`, `"pattern" is not supported`},
		{`{"$ref":"#/$defs/missing"}`, `"$defs" not found`},
		{`{"$ref":"https://example.com/s.json"}`, `only references into this schema`},
		{`{"type":"object","properties":{"a":{}},"required":["b"]}`, `required property "b" is not among the properties`},
		{`{"type":"array","minItems":3,"maxItems":1}`, `maxItems 1 is below minItems 3`},
		{`{"type":"integer","minimum":5,"maximum":1}`, `no integer lies between`},
		{`{"type":"number","minimum":0.5}`, `integers only`},
		{`{"enum":[]}`, `enum must be a non-empty array`},
		{`{"type":"string","maxLength":-1}`, `maxLength must be a non-negative integer`},
		{`{"anyOf":[{}],"properties":{}}`, `anyOf together with "properties"`},
		{`{"type":"array","uniqueItems":true}`, `"uniqueItems" is not supported`},
		{`{`, `not valid JSON`},
		{`false`, `allows no value`},
		// Found by FuzzSchema: a $ref to itself before any character.
		{`{"a":{"b":1},"$ref":"#"}`, `$refs form a cycle`},
		{`{"$defs":{"a":{"anyOf":[{"$ref":"#/$defs/b"}]},"b":{"$ref":"#/$defs/a"}},"$ref":"#/$defs/a"}`, `$refs form a cycle`},
	} {
		_, err := FromJSONSchema([]byte(tc.schema))
		var se *SchemaError
		if err == nil || !errors.As(err, &se) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("FromJSONSchema(%s) = %v, want an error containing %q", tc.schema, err, tc.want)
		}
	}
}

func TestUntil(t *testing.T) {
	for _, marker := range []string{"</think>", "<|close|>think<|sep|>", "aab", "abab", "x"} {
		b := NewSchemaBuilder()
		b.Rule("root", b.Until("body", marker))
		g := mustParse(t, b.String())
		for _, body := range []string{"", "hello", "<", "</thin", "aa", "aba", "<|close|>thin", "a\nb日本"} {
			s := body + marker
			want := !strings.Contains(s[:len(s)-1], marker)
			if matches(g, s) != want {
				t.Errorf("until %q: %q matches = %v, want %v\n%s", marker, s, !want, want, b)
			}
		}
		if matches(g, marker+"x"+marker) || matches(g, "abc") {
			t.Errorf("until %q: text past the first marker, or without it, matches", marker)
		}
	}
}

// TestAddAt: a property's schema becomes rules on its own, its $refs
// resolved in the whole document; a path that is not there is an error
// that names it.
func TestAddAt(t *testing.T) {
	schema := []byte(`{"type":"object","properties":{"a/b":{"type":"array","items":{"$ref":"#/$defs/n"}}},"$defs":{"n":{"type":"integer"}}}`)
	b := NewSchemaBuilder()
	r, err := b.AddAt("arg", schema, "properties", "a/b")
	if err != nil {
		t.Fatal(err)
	}
	b.Rule("root", r)
	g := mustParse(t, b.String())
	for s, want := range map[string]bool{`[1, 2]`: true, `[]`: true, `["x"]`: false, `{"a/b": [1]}`: false} {
		if matches(g, s) != want {
			t.Errorf("%s matches = %v, want %v\n%s", s, !want, want, b)
		}
	}
	if _, err := NewSchemaBuilder().AddAt("x", schema, "properties", "c"); err == nil || !strings.Contains(err.Error(), "/properties/c") {
		t.Errorf("missing property: %v", err)
	}
	var se *SchemaError
	if _, err := NewSchemaBuilder().AddAt("x", []byte(`{"properties":{"p":{"type":"string","not":{}}}}`), "properties", "p"); !errors.As(err, &se) || se.Path != "/properties/p" {
		t.Errorf("unsupported keyword: %v", err)
	}
}

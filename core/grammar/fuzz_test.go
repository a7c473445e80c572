package grammar

import (
	"testing"
)

// FuzzParse: any text parses or fails with an *Error, never a panic or a
// hang; what parses prints back to a grammar that parses, and a matcher
// on it survives a few steps over a small vocabulary.
func FuzzParse(f *testing.F) {
	for _, s := range []string{jsonGBNF, `root ::= "a"{2,5} | [^x-z]* <[3]> !<[4]>`, "root ::= (\"x\" | y)+\ny ::= [a-c]?",
		`root ::= "\x41\u00e9" . [\]\-]`, "root ::= a\na ::= \"b\" a | \"\"", `root ::= ("a"{0,40}){0,40}`} {
		f.Add(s)
	}
	v := NewVocab(smallVocab(), nil)
	f.Fuzz(func(t *testing.T, src string) {
		g, err := Parse(src, Options{})
		if err != nil {
			if _, ok := err.(*Error); !ok {
				t.Fatalf("error of type %T: %v", err, err)
			}
			return
		}
		if _, err := Parse(g.String(), Options{}); err != nil {
			t.Fatalf("the printed grammar does not parse: %v\n%s", err, g)
		}
		m := NewMatcher(g, v)
		for range 4 {
			a := m.Allowed()
			next := int32(-1)
			for id := range int32(v.Size()) {
				if a.Has(id) {
					next = id
					break
				}
			}
			if next < 0 {
				break
			}
			if err := m.Accept(next); err != nil {
				t.Fatalf("an allowed token is rejected: %v", err)
			}
		}
	})
}

// FuzzSchema: any JSON converts or fails with a *SchemaError, and what
// converts parses.
func FuzzSchema(f *testing.F) {
	for _, c := range schemaCases {
		f.Add(c.schema)
	}
	f.Fuzz(func(t *testing.T, schema string) {
		src, err := FromJSONSchema([]byte(schema))
		if err != nil {
			if _, ok := err.(*SchemaError); !ok {
				t.Fatalf("error of type %T: %v", err, err)
			}
			return
		}
		if _, err := Parse(src, Options{}); err != nil {
			t.Fatalf("the grammar of %s does not parse: %v\n%s", schema, err, src)
		}
	})
}

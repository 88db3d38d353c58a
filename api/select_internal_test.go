package api

import (
	"encoding/json"
	"errors"
	"maps"
	"strconv"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/snapflip/snapflip/snapshot"
)

func TestProject(t *testing.T) {
	tests := []struct {
		name, body, sel, want string
	}{
		{"document order, not select order", `{"a":1,"b":2,"c":3}`, "c,a", `{"a":1,"c":3}`},
		{"jsonb spacing, values kept as they are", `{"a": 1.10, "b": [1, {"x": "}"}], "c": null}`, "b,c", `{"b":[1, {"x": "}"}],"c":null}`},
		{"a field the document lacks is absent", `{"a":1}`, "a,zz", `{"a":1}`},
		{"nothing selected is present", `{"a":1}`, "zz", `{}`},
		{"empty document", ` { } `, "a", `{}`},
		{"escaped names compare decoded", `{"\u0061":1,"b\"c":2,"d\\e":3}`, `a,b"c`, `{"\u0061":1,"b\"c":2}`},
		{"names with spaces, commas' neighbours, unicode", `{"a b":1,"ü":"\"}","é":{"[":"]"}}`, "a b,é", `{"a b":1,"é":{"[":"]"}}`},
		{"a name held twice is kept twice", `{"a":1,"b":2,"a":3}`, "a", `{"a":1,"a":3}`},
		{"strings holding brackets and escapes", `{"s":"a\\\"{[","t":"x"}`, "t", `{"t":"x"}`},
		{"deep nesting", `{"d":` + strings.Repeat("[", 40) + strings.Repeat("]", 40) + `,"e":true}`, "d", `{"d":` + strings.Repeat("[", 40) + strings.Repeat("]", 40) + `}`},
	}
	for _, tt := range tests {
		sel, err := newSelection(tt.sel)
		if err != nil {
			t.Fatalf("%s: newSelection(%q): %v", tt.name, tt.sel, err)
		}
		got, err := sel.apply([]byte(tt.body))
		if err != nil || string(got) != tt.want {
			t.Errorf("%s: project(%s, %q) = %s, %v; want %s", tt.name, tt.body, tt.sel, got, err, tt.want)
		}
	}
}

func TestProjectRefusesMalformedDocuments(t *testing.T) {
	for _, body := range []string{``, `[]`, `"a"`, `{`, `{"a"}`, `{"a":}`, `{"a":1,}`, `{"a":1 "b":2}`, `{"a":[}`, `{"a":{]}`,
		`{"a":"x}`, `{a:1}`, `{"a":1}x`, `{"a":1}{}`, "{\"a\x01\":1}"} {
		if got, err := project([]byte(body), map[string]struct{}{"a": {}}); err == nil {
			t.Errorf("project(%q) = %s; want an error", body, got)
		}
	}
}

func TestNewSelection(t *testing.T) {
	tests := []struct {
		in   string
		want string // a fragment of the problem; "" when valid
	}{
		{"a", ""},
		{"a b,ü,\"q\",x.y", ""},
		{strings.Repeat("f,", maxSelectFields-1) + "g", "named twice"},
		{"", "select: empty"},
		{"a,,b", "field 2 is empty"},
		{",a", "field 1 is empty"},
		{"a,", "field 2 is empty"},
		{"a,b,a", `field "a" is named twice`},
		{"a\x00b", "NUL"},
		{"a\xffb", "UTF-8"},
		{strings.Repeat("x,", maxSelectFields) + "y", "101 fields, over the limit of 100"},
		{strings.Repeat("x", maxSelectBytes+1), "4097 bytes, over the limit of 4096"},
	}
	for _, tt := range tests {
		_, err := newSelection(tt.in)
		switch {
		case tt.want == "" && err != nil:
			t.Errorf("newSelection(%.40q) = %v; want it valid", tt.in, err)
		case tt.want != "" && (err == nil || !errors.Is(err, snapshot.ErrInvalid) || !strings.Contains(err.Error(), tt.want)):
			t.Errorf("newSelection(%.40q) = %v; want a bad request saying %q", tt.in, err, tt.want)
		case err != nil && len(err.Error()) > 300:
			t.Errorf("newSelection(%.40q): a %d-byte message; want it truncated", tt.in, len(err.Error()))
		}
	}
	var longest []string
	for i := range maxSelectFields {
		longest = append(longest, "f"+strconv.Itoa(i))
	}
	if _, err := newSelection(strings.Join(longest, ",")); err != nil {
		t.Errorf("%d distinct fields: %v; want them taken", maxSelectFields, err)
	}
}

// TestSelectionETags: a selection's ETag differs from the whole document's and from
// other selections', depends on the set of fields and not on the order they were
// listed in, and stays while the selected bytes do.
func TestSelectionETags(t *testing.T) {
	doc := []byte(`{"a":1,"b":2}`)
	tag := func(s string, body []byte) string {
		t.Helper()
		if s == "" {
			return `"full"`
		}
		sel, err := newSelection(s)
		if err != nil {
			t.Fatal(err)
		}
		p, err := sel.apply(body)
		if err != nil {
			t.Fatal(err)
		}
		return sel.etag(`"full"`, p)
	}
	seen := map[string]string{}
	for _, s := range []string{"", "a", "b", "a,b", "a,zz", "zz", "a,b,zz"} {
		e := tag(s, doc)
		if other, dup := seen[e]; dup {
			t.Errorf("select %q and %q share the ETag %s", s, other, e)
		}
		seen[e] = s
	}
	if a, b := tag("a,b", doc), tag("b,a", doc); a != b {
		t.Errorf("select a,b = %s, b,a = %s; want one ETag for one set", a, b)
	}
	if a, b := tag("a", doc), tag("a", []byte(`{"a":1,"b":3}`)); a != b {
		t.Errorf("select a over documents differing only in b: %s, %s; want one ETag", a, b)
	}
	if a, b := tag("a", doc), tag("a", []byte(`{"a":2,"b":2}`)); a == b {
		t.Errorf("select a over documents differing in a: both %s; want two ETags", a)
	}
}

// FuzzProject: a projection of any JSON object is valid JSON that decodes to what
// decoding the document and keeping the selected keys gives; anything else is refused
// without a panic.
func FuzzProject(f *testing.F) {
	for _, s := range [][2]string{
		{`{"a":1,"b":[1,{"c":"}"}],"c":null}`, "a,c"},
		{`{"a": 1.10, "b": "x\"y", "a": 2}`, "a"},
		{`{"\u0061":true,"\ud83d\ude00":{}}`, "a,😀"},
		{"{\"\xff\":1}", "\ufffd"},
		{`{}`, "a"},
		{`[1]`, "a"},
		{`{"a":1,}`, "a"},
	} {
		f.Add(s[0], s[1])
	}
	f.Fuzz(func(t *testing.T, body, fields string) {
		sel, err := newSelection(fields)
		if err != nil {
			return // refused with a 400 before any document is read
		}
		got, err := sel.apply([]byte(body))
		var doc map[string]any
		if json.Unmarshal([]byte(body), &doc) != nil || doc == nil {
			return // not an object: any answer but a panic will do (Postgres makes objects)
		}
		if err != nil {
			t.Fatalf("project(%q, %q) = %v; want the object projected", body, fields, err)
		}
		var projected map[string]any
		if err := json.Unmarshal(got, &projected); err != nil {
			t.Fatalf("project(%q, %q) = %q, not JSON: %v", body, fields, got, err)
		}
		want := maps.Clone(doc)
		maps.DeleteFunc(want, func(k string, _ any) bool { _, ok := sel.keep[k]; return !ok })
		if diff := cmp.Diff(want, projected); diff != "" {
			t.Fatalf("project(%q, %q) = %q (-want +got):\n%s", body, fields, got, diff)
		}
	})
}

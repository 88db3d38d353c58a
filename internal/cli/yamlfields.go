package cli

import (
	"fmt"
	"reflect"
	"strings"

	"gopkg.in/yaml.v3"
)

// decodeFields decodes a YAML node into v (settable) as yaml.v3 does with KnownFields,
// but one field at a time, so that every error names the field's path
// ("bigtable.writers", "collections[2].key") and line, where yaml.v3 names only a
// line: "line 1: cannot unmarshal !!str `many` into int". Unknown and repeated keys
// are errors. Fields the node does not set keep their value (the defaults).
func decodeFields(n *yaml.Node, v reflect.Value, path string) error {
	for n.Kind == yaml.DocumentNode || n.Kind == yaml.AliasNode {
		if n.Kind == yaml.AliasNode {
			n = n.Alias
		} else if len(n.Content) == 0 {
			return nil
		} else {
			n = n.Content[0]
		}
	}
	switch {
	case v.Kind() == reflect.Struct && n.Kind == yaml.MappingNode:
		fields := map[string]reflect.Value{}
		yamlFields(v, fields)
		seen := map[string]int{}
		for i := 0; i+1 < len(n.Content); i += 2 {
			k, val := n.Content[i], n.Content[i+1]
			if k.Tag == "!!merge" { // <<: *anchor
				if err := decodeFields(val, v, path); err != nil {
					return err
				}
				continue
			}
			name := k.Value
			if path != "" {
				name = path + "." + k.Value
			}
			if line, dup := seen[k.Value]; dup {
				return fmt.Errorf("%s (line %d): set twice; first on line %d", name, k.Line, line)
			}
			seen[k.Value] = k.Line
			f, ok := fields[k.Value]
			if !ok {
				return fmt.Errorf("%s (line %d): unknown field", name, k.Line)
			}
			if err := decodeFields(val, f, name); err != nil {
				return err
			}
		}
		return nil
	case v.Kind() == reflect.Slice && v.Type().Elem().Kind() == reflect.Struct && n.Kind == yaml.SequenceNode:
		s := reflect.MakeSlice(v.Type(), len(n.Content), len(n.Content))
		for i, item := range n.Content {
			if err := decodeFields(item, s.Index(i), fmt.Sprintf("%s[%d]", path, i)); err != nil {
				return err
			}
		}
		v.Set(s)
		return nil
	}
	if err := n.Decode(v.Addr().Interface()); err != nil {
		msg := err.Error()
		if i := strings.LastIndex(msg, fmt.Sprintf("line %d: ", n.Line)); i >= 0 {
			msg = msg[i+len(fmt.Sprintf("line %d: ", n.Line)):]
		}
		return fmt.Errorf("%s (line %d): %s", path, n.Line, msg)
	}
	return nil
}

// yamlFields maps the YAML names of a struct's fields to the fields, flattening
// ",inline" structs, as yaml.v3 names them.
func yamlFields(v reflect.Value, out map[string]reflect.Value) {
	t := v.Type()
	for i := range t.NumField() {
		f := t.Field(i)
		if !f.IsExported() {
			continue
		}
		name, opts, _ := strings.Cut(f.Tag.Get("yaml"), ",")
		switch {
		case name == "-":
		case strings.Contains(opts, "inline"):
			yamlFields(v.Field(i), out)
		case name == "":
			out[strings.ToLower(f.Name)] = v.Field(i)
		default:
			out[name] = v.Field(i)
		}
	}
}

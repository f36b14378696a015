package main

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strings"

	"gopkg.in/yaml.v3"
)

// Key is one configuration key of the reference.
type Key struct {
	// Path is the key as a file writes it (lease.duration, chains[].id).
	Path string
	// Default is its value in the embedded defaults ("" when it has none there).
	Default string
	// Env is the environment variable the defaults read it from, if any.
	Env string
	// Meaning is what it does, from the comments beside its field and above its key.
	Meaning string
}

// goField is a field of a configuration type: its key, its type's name, and its comment.
type goField struct {
	key, name, typ, doc string
	list                bool // a list of typ
}

// Collect reads the configuration types and the defaults in dir and lists every key, in the
// order the types declare them.
func Collect(dir string) ([]Key, error) {
	types, err := parseTypes(dir)
	if err != nil {
		return nil, err
	}
	raw, err := os.ReadFile(filepath.Join(dir, "defaults.yaml"))
	if err != nil {
		return nil, err
	}
	var doc yaml.Node
	if err := yaml.Unmarshal(raw, &doc); err != nil {
		return nil, fmt.Errorf("defaults.yaml: %w", err)
	}
	defaults := map[string]yamlKey{}
	if len(doc.Content) > 0 {
		walkYAML("", doc.Content[0], defaults)
	}
	var keys []Key
	walkType("", "Bootstrap", types, defaults, map[string]bool{}, &keys)
	inheritMeanings(keys, defaults)
	return keys, nil
}

// inheritMeanings gives a key without a meaning of its own the one its section's comment
// gives the keys under it, and a chains[] entry's key the meaning of the chain key it
// overrides.
func inheritMeanings(keys []Key, defaults map[string]yamlKey) {
	byPath := make(map[string]string, len(keys))
	for _, k := range keys {
		byPath[k.Path] = k.Meaning
	}
	for i, k := range keys {
		if k.Meaning != "" {
			continue
		}
		if rest, ok := strings.CutPrefix(k.Path, "chain."); ok {
			if m := byPath[rest]; m != "" { // a chain's own confirmations and fees
				keys[i].Meaning, byPath[k.Path] = "For this chain: "+m, "For this chain: "+m
				continue
			}
		}
		if rest, ok := strings.CutPrefix(k.Path, "chains[]."); ok {
			if m := byPath["chain."+rest]; m != "" {
				keys[i].Meaning = strings.TrimPrefix(m, "For this chain: ")
				keys[i].Meaning = "For this chain: " + keys[i].Meaning
				continue
			}
		}
		if parent, _, ok := cutLast(k.Path); ok {
			if c := defaults[parent].comment; c != "" {
				keys[i].Meaning = c
			}
		}
	}
}

// cutLast splits a key path at its last dot.
func cutLast(path string) (string, string, bool) {
	i := strings.LastIndexByte(path, '.')
	if i < 0 {
		return "", path, false
	}
	return path[:i], path[i+1:], true
}

// Undocumented lists the keys without a meaning.
func Undocumented(keys []Key) []string {
	var missing []string
	for _, k := range keys {
		if strings.TrimSpace(k.Meaning) == "" {
			missing = append(missing, k.Path)
		}
	}
	return missing
}

// parseTypes reads the struct types of the package's Go files (tests aside).
func parseTypes(dir string) (map[string][]goField, error) {
	fset := token.NewFileSet()
	files, err := filepath.Glob(filepath.Join(dir, "*.go"))
	if err != nil {
		return nil, err
	}
	types := map[string][]goField{}
	for _, path := range files {
		if strings.HasSuffix(path, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, path, nil, parser.ParseComments)
		if err != nil {
			return nil, err
		}
		for _, decl := range f.Decls {
			gen, ok := decl.(*ast.GenDecl)
			if !ok || gen.Tok != token.TYPE {
				continue
			}
			for _, spec := range gen.Specs {
				ts := spec.(*ast.TypeSpec)
				st, ok := ts.Type.(*ast.StructType)
				if !ok {
					continue
				}
				types[ts.Name.Name] = structFields(st)
			}
		}
	}
	if _, ok := types["Bootstrap"]; !ok {
		return nil, fmt.Errorf("%s: no Bootstrap type", dir)
	}
	return types, nil
}

// structFields lists a struct's fields that carry a json key; an embedded struct's fields
// are its own (JSON flattens them), marked by an empty key and the type to inline.
func structFields(st *ast.StructType) []goField {
	var fields []goField
	for _, field := range st.Fields.List {
		typ, list := typeName(field.Type)
		doc := commentText(field.Doc)
		if doc == "" {
			doc = commentText(field.Comment)
		}
		if len(field.Names) == 0 { // embedded
			fields = append(fields, goField{typ: typ, doc: doc})
			continue
		}
		if field.Tag == nil {
			continue
		}
		tag := reflect.StructTag(strings.Trim(field.Tag.Value, "`")).Get("json")
		key, _, _ := strings.Cut(tag, ",")
		if key == "" || key == "-" {
			continue
		}
		fields = append(fields, goField{key: key, name: field.Names[0].Name, typ: typ, doc: doc, list: list})
	}
	return fields
}

func typeName(expr ast.Expr) (string, bool) {
	switch t := expr.(type) {
	case *ast.Ident:
		return t.Name, false
	case *ast.StarExpr:
		return typeName(t.X)
	case *ast.ArrayType:
		name, _ := typeName(t.Elt)
		return name, true
	case *ast.SelectorExpr:
		return t.Sel.Name, false
	case *ast.MapType:
		return "map", false
	}
	return "", false
}

// commentText is a comment group as one paragraph.
func commentText(g *ast.CommentGroup) string {
	if g == nil {
		return ""
	}
	return strings.Join(strings.Fields(g.Text()), " ")
}

// yamlKey is a key of defaults.yaml: its value as written and the comment above it.
type yamlKey struct {
	value, comment string
}

// walkYAML records every key of the defaults with its value and comment; a list is one key.
func walkYAML(path string, node *yaml.Node, out map[string]yamlKey) {
	if node.Kind != yaml.MappingNode {
		return
	}
	for i := 0; i+1 < len(node.Content); i += 2 {
		k, v := node.Content[i], node.Content[i+1]
		key := k.Value
		if path != "" {
			key = path + "." + k.Value
		}
		comment := cleanComment(k.HeadComment)
		switch v.Kind {
		case yaml.MappingNode:
			out[key] = yamlKey{comment: comment}
			walkYAML(key, v, out)
		default:
			out[key] = yamlKey{value: renderValue(v), comment: comment}
		}
	}
}

// cleanComment turns a YAML head comment into a paragraph, leaving out its example lines
// (indented after the #) which belong to the file, not the reference.
func cleanComment(c string) string {
	var words []string
	for _, line := range strings.Split(c, "\n") {
		line = strings.TrimPrefix(strings.TrimSpace(line), "#")
		if strings.HasPrefix(line, "   ") || strings.TrimSpace(line) == "" && len(words) > 0 {
			continue
		}
		words = append(words, strings.Fields(line)...)
	}
	return strings.Join(words, " ")
}

func renderValue(v *yaml.Node) string {
	if v.Kind == yaml.ScalarNode {
		return v.Value
	}
	out, err := yaml.Marshal(v)
	if err != nil {
		return ""
	}
	s := strings.TrimSpace(string(out))
	if s == "[]" || s == "{}" {
		return s
	}
	return strings.Join(strings.Fields(s), " ")
}

// placeholder is ${NAME:default} or ${NAME}.
var placeholder = regexp.MustCompile(`^\$\{(\w+)(?::(.*))?\}$`)

// walkType lists the keys of the type name under path, depth first in declaration order.
func walkType(path, name string, types map[string][]goField, defaults map[string]yamlKey, seen map[string]bool, out *[]Key) {
	for _, f := range types[name] {
		if f.key == "" { // embedded: its fields are this type's
			walkType(path, f.typ, types, defaults, seen, out)
			continue
		}
		key := f.key
		if path != "" {
			key = path + "." + f.key
		}
		if _, isStruct := types[f.typ]; isStruct && f.typ != "Duration" {
			sub := key
			if f.list {
				sub = key + "[]"
			}
			if f.list || f.typ == "Chain" && name == "Bootstrap" && f.key == "chains" {
				// A list of sections: its own line, then each entry's keys.
				*out = append(*out, entry(key, f, defaults))
			}
			if !seen[sub] {
				seen[sub] = true
				walkType(sub, f.typ, types, defaults, seen, out)
			}
			continue
		}
		*out = append(*out, entry(key, f, defaults))
	}
}

// entry makes one key's line.
func entry(key string, f goField, defaults map[string]yamlKey) Key {
	k := Key{Path: key}
	y := defaults[key]
	k.Default = y.value
	if m := placeholder.FindStringSubmatch(y.value); m != nil {
		k.Env, k.Default = m[1], m[2]
	}
	// The file's comment speaks to whoever sets the key; the field's speaks to the code, and
	// names the field by its Go name, which the reference replaces with the key's.
	k.Meaning = y.comment
	if k.Meaning == "" {
		k.Meaning = f.doc
		if rest, ok := strings.CutPrefix(f.doc, f.name); ok && f.name != "" {
			k.Meaning = "`" + f.key + "`" + rest
		}
	}
	return k
}

// Render is the reference as Markdown: a table per top-level section.
func Render(keys []Key) string {
	var b strings.Builder
	b.WriteString(`# Configuration reference

Generated from the configuration types (` + "`internal/conf`" + `) and the embedded defaults
(` + "`internal/conf/defaults.yaml`" + `) by ` + "`make generate`" + ` (` + "`internal/conf/confdoc`" + `); do not edit by hand.
The service starts on the defaults; a file given with ` + "`-conf`" + ` overrides any key, and the
environment variables named below override the keys the defaults read them into. A key the
service does not know, or a value of the wrong shape, stops it at start with the key's path.
` + "`chains[]`" + ` entries take every ` + "`chain.*`" + ` key as their default.
`)
	var section string
	for _, k := range keys {
		top, _, _ := strings.Cut(k.Path, ".")
		top = strings.TrimSuffix(top, "[]")
		if top != section {
			section = top
			fmt.Fprintf(&b, "\n## %s\n\n| key | default | environment | meaning |\n|---|---|---|---|\n", section)
		}
		fmt.Fprintf(&b, "| `%s` | %s | %s | %s |\n", k.Path, cell(k.Default, true), cell(k.Env, true), cell(k.Meaning, false))
	}
	return b.String()
}

// cell escapes a table cell; code cells show an empty value as a dash.
func cell(s string, code bool) string {
	s = strings.ReplaceAll(s, "|", `\|`)
	switch {
	case code && s == "":
		return "-"
	case code && s == `""`:
		return "`\"\"`"
	case code:
		return "`" + s + "`"
	}
	return s
}

// sortedPaths is for tests and messages.
func sortedPaths(keys []Key) []string {
	paths := make([]string, len(keys))
	for i, k := range keys {
		paths[i] = k.Path
	}
	slices.Sort(paths)
	return paths
}

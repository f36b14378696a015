package conf

import (
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"sort"
	"strings"
)

// checkKeys holds the merged configuration tree against Bootstrap: every key must be one
// the service reads, and every value must decode into its setting. Each problem names the
// key's full path (lease.duration, chains[1].rpcUrl) and, for an unknown key, the nearest
// known one. Keys are spelled exactly: a key that differs only in case would otherwise
// lose silently to the defaults' spelling when the sources are merged.
func checkKeys(tree map[string]any) error {
	var problems []string
	walkKeys("", tree, reflect.TypeFor[Bootstrap](), &problems)
	if len(problems) == 0 {
		return nil
	}
	sort.Strings(problems)
	errs := make([]error, len(problems))
	for i, p := range problems {
		errs[i] = errors.New(p)
	}
	return fmt.Errorf("configuration: %w", errors.Join(errs...))
}

var unmarshalerType = reflect.TypeFor[json.Unmarshaler]()

func walkKeys(path string, value any, t reflect.Type, problems *[]string) {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if value == nil || reflect.PointerTo(t).Implements(unmarshalerType) {
		checkDecodes(path, value, t, problems)
		return
	}
	switch t.Kind() {
	case reflect.Struct:
		section, ok := value.(map[string]any)
		if !ok {
			*problems = append(*problems, fmt.Sprintf("%s: must be a section of settings, not %s", pathOr(path), describe(value)))
			return
		}
		fields := jsonFields(t)
		for key, v := range section {
			if path == "" && slices.Contains(EnvironmentVariables(), key) {
				continue // an environment variable the defaults refer to, not a setting
			}
			field, ok := fieldFor(fields, key)
			if !ok {
				*problems = append(*problems, unknownKey(path, key, fields))
				continue
			}
			walkKeys(join(path, field.name), v, field.typ, problems)
		}
	case reflect.Slice:
		list, ok := value.([]any)
		if !ok {
			*problems = append(*problems, fmt.Sprintf("%s: must be a list, not %s", pathOr(path), describe(value)))
			return
		}
		for i, v := range list {
			walkKeys(fmt.Sprintf("%s[%d]", path, i), v, t.Elem(), problems)
		}
	case reflect.Map:
		entries, ok := value.(map[string]any)
		if !ok {
			*problems = append(*problems, fmt.Sprintf("%s: must be a section, not %s", pathOr(path), describe(value)))
			return
		}
		for k, v := range entries {
			walkKeys(join(path, k), v, t.Elem(), problems)
		}
	default:
		checkDecodes(path, value, t, problems)
	}
}

// checkDecodes reports a value that does not decode into its setting's type.
func checkDecodes(path string, value any, t reflect.Type, problems *[]string) {
	raw, err := json.Marshal(value)
	if err == nil {
		err = json.Unmarshal(raw, reflect.New(t).Interface())
	}
	if err != nil {
		var typeErr *json.UnmarshalTypeError
		if errors.As(err, &typeErr) {
			err = fmt.Errorf("must be %s, not %s", describeType(t), describe(value))
		}
		*problems = append(*problems, fmt.Sprintf("%s: %v", pathOr(path), err))
	}
}

type jsonField struct {
	name string
	typ  reflect.Type
}

// jsonFields are the keys a struct decodes, with the fields of embedded structs promoted.
func jsonFields(t reflect.Type) []jsonField {
	var out []jsonField
	for f := range t.Fields() {
		if !f.IsExported() {
			continue
		}
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if name == "-" {
			continue
		}
		if f.Anonymous && name == "" && f.Type.Kind() == reflect.Struct {
			out = append(out, jsonFields(f.Type)...)
			continue
		}
		if name == "" {
			name = f.Name
		}
		out = append(out, jsonField{name: name, typ: f.Type})
	}
	return out
}

func fieldFor(fields []jsonField, key string) (jsonField, bool) {
	for _, f := range fields {
		if f.name == key {
			return f, true
		}
	}
	return jsonField{}, false
}

// unknownKey says the key is unknown and, when one is close enough to be a misspelling,
// which known key was meant; otherwise it lists the keys the section has.
func unknownKey(path, key string, fields []jsonField) string {
	best, bestDistance := "", -1
	for _, f := range fields {
		d := editDistance(strings.ToLower(key), strings.ToLower(f.name))
		if bestDistance < 0 || d < bestDistance {
			best, bestDistance = f.name, d
		}
	}
	if best != "" && (bestDistance <= 2 || bestDistance*3 <= len(best) || strings.Contains(strings.ToLower(key), strings.ToLower(best))) {
		return fmt.Sprintf("%s: unknown key (did you mean %s?)", join(path, key), join(path, best))
	}
	names := make([]string, len(fields))
	for i, f := range fields {
		names[i] = f.name
	}
	sort.Strings(names)
	return fmt.Sprintf("%s: unknown key (%s has %s)", join(path, key), pathOr(path), strings.Join(names, ", "))
}

// editDistance is the Levenshtein distance between a and b.
func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur := make([]int, len(b)+1)
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev = cur
	}
	return prev[len(b)]
}

func join(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

func pathOr(path string) string {
	if path == "" {
		return "the configuration"
	}
	return path
}

func describe(v any) string {
	switch v.(type) {
	case map[string]any:
		return "a section"
	case []any:
		return "a list"
	case string:
		return fmt.Sprintf("the text %q", v)
	case bool:
		return fmt.Sprintf("%v", v)
	case nil:
		return "empty"
	default:
		return fmt.Sprintf("%v", v)
	}
}

func describeType(t reflect.Type) string {
	switch t.Kind() {
	case reflect.Bool:
		return "true or false"
	case reflect.String:
		return "text"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64, reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return "a whole number"
	case reflect.Float32, reflect.Float64:
		return "a number"
	case reflect.Slice:
		return "a list"
	default:
		return t.String()
	}
}

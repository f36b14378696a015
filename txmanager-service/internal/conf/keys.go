package conf

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"reflect"
	"slices"
	"sort"
	"strconv"
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

// checkDecodes reports a value that does not decode into its setting's type. The message
// says what the value is (text, a number, a list), never what it says: a value written in
// the wrong place may be a key, a passphrase or a password.
func checkDecodes(path string, value any, t reflect.Type, problems *[]string) {
	raw, err := json.Marshal(value)
	if err == nil {
		err = json.Unmarshal(raw, reflect.New(t).Interface())
	}
	if err != nil {
		// Other errors are our own unmarshalers' (Duration), which do not quote the value;
		// encoding/json's type errors quote numbers.
		var typeErr *json.UnmarshalTypeError
		if errors.As(err, &typeErr) {
			err = errors.New(mismatch(value, t))
		}
		*problems = append(*problems, fmt.Sprintf("%s: %v", pathOr(path), err))
	}
}

// mismatch says what a setting of type t takes and what kind of value it was given.
func mismatch(value any, t reflect.Type) string {
	if lowest, highest, ok := wholeRange(t); ok && describe(value) == "a number" {
		if f, ok := value.(float64); ok && f != math.Trunc(f) {
			return "must be a whole number, not a number with a fraction"
		}
		return fmt.Sprintf("must be a whole number from %s to %s", lowest, highest)
	}
	return fmt.Sprintf("must be %s, not %s", describeType(t), describe(value))
}

// wholeRange is the smallest and largest value of an integer type.
func wholeRange(t reflect.Type) (lowest, highest string, ok bool) {
	switch t.Kind() {
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		low := int64(-1) << (t.Bits() - 1)
		return strconv.FormatInt(low, 10), strconv.FormatInt(^low, 10), true
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return "0", strconv.FormatUint(^uint64(0)>>(64-t.Bits()), 10), true
	}
	return "", "", false
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

// describe names the kind of a decoded YAML value, not the value.
func describe(v any) string {
	switch v.(type) {
	case map[string]any:
		return "a section"
	case []any:
		return "a list"
	case string:
		return "text"
	case bool:
		return "true or false"
	case nil:
		return "empty"
	case int, int64, uint64, float64:
		return "a number"
	default:
		return "a value"
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

package conf

import (
	"errors"
	"fmt"
	"math"
	"regexp"
	"strconv"
	"strings"
	"time"

	"gopkg.in/yaml.v3"
)

// checkYAML refuses a configuration document (the embedded defaults, the -conf file) that
// Kratos' YAML codec would fail to decode, and the values that would fail later without
// naming their key: each problem names the file, the line and column, and the key's path.
//
// No message quotes a value. A file is where a raw key, a keystore passphrase or a DSN
// password is written, and a broken one puts them where they do not belong; the errors
// reach the log. Kratos itself logs the whole document, at ERROR through its process-wide
// logger, when its decoder fails: it only ever sees documents this check passed, which its
// decoder (the same yaml.v3 parse and decode, below) then cannot fail on.
func checkYAML(name string, body []byte) error {
	var doc yaml.Node
	if err := yaml.Unmarshal(body, &doc); err != nil {
		return yamlError(name, err)
	}
	var problems []error
	report := func(n *yaml.Node, path, what string) {
		problems = append(problems, fmt.Errorf("%s:%d:%d: %s: %s", name, n.Line, n.Column, pathOr(path), what))
	}
	if len(doc.Content) > 0 {
		root := doc.Content[0]
		switch {
		case root.Kind == yaml.MappingNode:
			walkYAML("", root, report)
		case root.Kind == yaml.ScalarNode && root.ShortTag() == "!!null":
			// An empty file (or only comments): nothing to override.
		default:
			report(root, "", "must be a section of settings (key: value lines), not "+yamlKind(root))
		}
	}
	if len(problems) > 0 {
		return errors.Join(problems...)
	}
	// Kratos' YAML codec decodes the body into this type (yaml.Unmarshal is this parse and
	// this decode); whatever the walk above did not foresee is refused here rather than
	// inside Kratos.
	var tree map[string]any
	if err := doc.Decode(&tree); err != nil {
		return yamlError(name, err)
	}
	return nil
}

// walkYAML reports what decoding into map[string]any would refuse (a key written twice, a
// key that is not text) and the scalars no setting can hold, by path. Aliases are not
// followed: their anchor is checked where it is written, and following them is how an
// alias bomb gets big.
func walkYAML(path string, n *yaml.Node, report func(*yaml.Node, string, string)) {
	switch n.Kind {
	case yaml.MappingNode:
		first := map[string]*yaml.Node{}
		for i := 0; i+1 < len(n.Content); i += 2 {
			key, value := n.Content[i], n.Content[i+1]
			if key.Kind != yaml.ScalarNode {
				report(key, path, "a key must be text, not "+yamlKind(key))
				continue
			}
			keyPath := join(path, key.Value)
			if prev, ok := first[key.Value]; ok {
				report(key, keyPath, fmt.Sprintf("is written twice (first at line %d): remove one", prev.Line))
				continue
			}
			first[key.Value] = key
			if key.ShortTag() == "!!merge" {
				keyPath = path // a merge key (<<) adds its section's keys to this one
			}
			walkYAML(keyPath, value, report)
		}
	case yaml.SequenceNode:
		for i, item := range n.Content {
			walkYAML(fmt.Sprintf("%s[%d]", path, i), item, report)
		}
	case yaml.ScalarNode:
		var v any
		if err := n.Decode(&v); err != nil {
			report(n, path, "the value does not match its YAML tag")
			return
		}
		switch v := v.(type) {
		case time.Time:
			// Kratos cannot copy a time between its sources, and no setting is one.
			report(n, path, "a date or time is not a value any setting takes (quote it if it is text)")
		case float64:
			if math.IsNaN(v) || math.IsInf(v, 0) {
				report(n, path, "must be a finite number")
			}
		}
	}
}

func yamlKind(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a section"
	case yaml.SequenceNode:
		return "a list"
	case yaml.AliasNode:
		return "an alias"
	default:
		return "a single value"
	}
}

var (
	yamlLine = regexp.MustCompile(`^line (\d+): `)
	// The problems yaml.v3's parser (not its scanner) reports.
	yamlParserProblem = regexp.MustCompile(`^(did not find expected|found duplicate %|found incompatible YAML document|found undefined tag handle)`)
	// Quoted text from the document (an anchor's name, a key, a value). yaml.v3's own
	// problems quote single characters only (did not find expected ',' or ']'), so single
	// quotes around more than one character, the first not a space, are the document's.
	yamlQuoted = regexp.MustCompile("'[^'\\s][^']+'|\"[^\"]+\"|`[^`]+`")
)

// yamlError is yaml.v3's error, at its line, without what it quotes from the document:
// its type errors quote up to seven characters of a value, its alias errors an anchor's name.
func yamlError(name string, err error) error {
	msg := strings.TrimPrefix(err.Error(), "yaml: ")
	var typeErr *yaml.TypeError
	if errors.As(err, &typeErr) && len(typeErr.Errors) > 0 {
		msg = typeErr.Errors[0]
		if m := yamlLine.FindStringSubmatch(msg); m != nil {
			return fmt.Errorf("%s:%s: not valid YAML: a value of the wrong kind", name, m[1])
		}
		return fmt.Errorf("%s: not valid YAML: a value of the wrong kind", name)
	}
	if m := yamlLine.FindStringSubmatch(msg); m != nil {
		line, _ := strconv.Atoi(m[1])
		problem := msg[len(m[0]):]
		if yamlParserProblem.MatchString(problem) {
			// yaml.v3 counts these lines from 0: the line where the unclosed list or
			// section begins, or the one where it found what it did not expect.
			line++
		}
		return fmt.Errorf("%s:%d: not valid YAML: %s", name, line, yamlQuoted.ReplaceAllString(problem, "(…)"))
	}
	return fmt.Errorf("%s: not valid YAML: %s", name, yamlQuoted.ReplaceAllString(msg, "(…)"))
}

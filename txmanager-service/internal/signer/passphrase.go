package signer

import (
	"bytes"
	"errors"
	"fmt"
	"os"
)

// readPassphrase returns the keystore passphrase from exactly one of: the first line of
// file, or the environment variable named env. The configuration never holds the
// passphrase itself, so it cannot leak through a dump of the configuration.
func readPassphrase(file, env string) (string, error) {
	switch {
	case file != "" && env != "":
		return "", errors.New("set one of passphraseFile and passphraseEnv, not both")
	case file != "":
		content, err := os.ReadFile(file)
		if err != nil {
			// The *PathError names the file and the cause, never its content.
			return "", fmt.Errorf("passphrase file: %w", err)
		}
		line, _, _ := bytes.Cut(content, []byte("\n"))
		return string(bytes.TrimSuffix(line, []byte("\r"))), nil
	case env != "":
		value, ok := os.LookupEnv(env)
		if !ok {
			return "", fmt.Errorf("passphrase environment variable %s is not set", env)
		}
		return value, nil
	default:
		return "", errors.New("set passphraseFile or passphraseEnv")
	}
}

package conf

import (
	"fmt"
	"net/url"
	"regexp"

	"github.com/bionicotaku/txmanager-service/internal/domain"
)

// KMSKey is one secp256k1 key held by a cloud KMS. The private key never leaves the KMS:
// the service asks it for the public key once at startup and for a signature per
// transaction.
type KMSKey struct {
	// ID names the key. AWS: a key id, key ARN, alias name ("alias/...") or alias ARN.
	// Google Cloud: the crypto key version's resource name
	// (projects/P/locations/L/keyRings/R/cryptoKeys/K/cryptoKeyVersions/V).
	ID string `json:"id"`
	// Address is the signer the key is expected to hold. Optional; when set, startup fails
	// if the key's public key is another account's, so a mistyped key id cannot quietly
	// put an unexpected signer into service.
	Address string `json:"address"`
}

// AWSKMSSource signs with ECC_SECG_P256K1 keys in AWS KMS. Credentials come from the SDK's
// default chain (an IAM role for the service account on EKS, EKS Pod Identity, the
// instance profile), never from this file.
type AWSKMSSource struct {
	// Region of the keys; empty means the SDK's (AWS_REGION, which EKS sets).
	Region string `json:"region"`
	// Endpoint overrides the KMS endpoint: a VPC interface endpoint, or an emulator.
	Endpoint string   `json:"endpoint"`
	Keys     []KMSKey `json:"keys"`
	// Timeout bounds one signature, retries included: a KMS that stops answering fails the
	// signer's pass instead of holding it.
	Timeout Duration `json:"timeout"`
	// MaxAttempts bounds the tries of one call when KMS throttles or fails transiently.
	MaxAttempts int `json:"maxAttempts"`
}

// GCPKMSSource signs with EC_SIGN_SECP256K1_SHA256 keys in Google Cloud KMS. Credentials
// are Application Default Credentials (Workload Identity on GKE), never from this file.
type GCPKMSSource struct {
	// Endpoint overrides the KMS endpoint (host:port), e.g. a Private Service Connect one.
	Endpoint string `json:"endpoint"`
	// Plaintext reaches Endpoint without TLS and without credentials: a KMS emulator on
	// loopback. Development only.
	Plaintext bool     `json:"plaintext"`
	Keys      []KMSKey `json:"keys"`
	// Timeout and MaxAttempts as for AWSKMSSource.
	Timeout     Duration `json:"timeout"`
	MaxAttempts int      `json:"maxAttempts"`
}

// Configured reports whether the source names any key.
func (s AWSKMSSource) Configured() bool { return len(s.Keys) > 0 }

// Configured reports whether the source names any key.
func (s GCPKMSSource) Configured() bool { return len(s.Keys) > 0 }

// gcpKeyVersionName is the shape of a Cloud KMS crypto key version's resource name.
var gcpKeyVersionName = regexp.MustCompile(`^projects/[^/]+/locations/[^/]+/keyRings/[^/]+/cryptoKeys/[^/]+/cryptoKeyVersions/[^/]+$`)

// kmsProblems checks signers.awsKms and signers.gcpKms; each message starts with the key
// to change.
func (s Signers) kmsProblems(environment string) []error {
	var errs []error
	if aws := s.AWSKMS; aws.Configured() {
		errs = append(errs, kmsKeyProblems("signers.awsKms", aws.Keys, nil, aws.Timeout, aws.MaxAttempts)...)
		if aws.Endpoint != "" {
			if u, err := url.Parse(aws.Endpoint); err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" {
				errs = append(errs, fmt.Errorf("signers.awsKms.endpoint: must be an http(s) URL, e.g. https://kms.eu-west-1.amazonaws.com"))
			}
		}
	}
	gcp := s.GCPKMS
	if gcp.Configured() {
		errs = append(errs, kmsKeyProblems("signers.gcpKms", gcp.Keys, gcpKeyVersionName, gcp.Timeout, gcp.MaxAttempts)...)
	}
	// Also with no keys configured: signers added at run time (the roster) use the same
	// connection.
	if gcp.Configured() || gcp.Plaintext || gcp.Endpoint != "" {
		if gcp.Plaintext && environment != EnvironmentDevelopment {
			errs = append(errs, fmt.Errorf("signers.gcpKms.plaintext: is for a development emulator only (environment is not %s): remove it to reach Cloud KMS over TLS with Workload Identity", EnvironmentDevelopment))
		}
		if gcp.Plaintext && gcp.Endpoint == "" {
			errs = append(errs, fmt.Errorf("signers.gcpKms.endpoint: must be set (the emulator's host:port) when signers.gcpKms.plaintext is on"))
		}
	}
	return errs
}

// kmsKeyProblems checks one KMS source's keys, deadline and attempts; idShape, when set,
// is what every key id must look like. Messages name the entry, not the id (see Check).
func kmsKeyProblems(prefix string, keys []KMSKey, idShape *regexp.Regexp, timeout Duration, maxAttempts int) []error {
	var errs []error
	firstWith := map[string]int{}
	for i, key := range keys {
		field := fmt.Sprintf("%s.keys[%d]", prefix, i)
		first, seen := firstWith[key.ID]
		switch {
		case key.ID == "":
			errs = append(errs, fmt.Errorf("%s.id: is empty", field))
		case idShape != nil && !idShape.MatchString(key.ID):
			errs = append(errs, fmt.Errorf("%s.id: is not a crypto key version name (projects/P/locations/L/keyRings/R/cryptoKeys/K/cryptoKeyVersions/V)", field))
		case seen:
			errs = append(errs, fmt.Errorf("%s.id: is listed twice (as %s.keys[%d].id too)", field, prefix, first))
		}
		if !seen {
			firstWith[key.ID] = i
		}
		if key.Address != "" {
			if _, err := domain.ParseAddress(field+".address", key.Address); err != nil {
				errs = append(errs, err)
			}
		}
	}
	if timeout <= 0 {
		errs = append(errs, fmt.Errorf("%s.timeout: must be positive", prefix))
	}
	if maxAttempts < 1 || maxAttempts > 10 {
		errs = append(errs, fmt.Errorf("%s.maxAttempts: must be in 1..10", prefix))
	}
	return errs
}

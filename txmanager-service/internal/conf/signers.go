package conf

// Signers configures the key sources. Every address any source holds is a managed signer.
type Signers struct {
	// RawKeys are hex private keys, accepted only when environment is "development".
	RawKeys  []string       `json:"rawKeys"`
	Keystore KeystoreSource `json:"keystore"`
	External ExternalSource `json:"external"`
	AWSKMS   AWSKMSSource   `json:"awsKms"`
	GCPKMS   GCPKMSSource   `json:"gcpKms"`
	// RosterPollInterval: how often each node reads the signer roster (signers added and
	// retired at run time through the admin API). At most lease.duration, so a signer added
	// on one node serves on every node within one lease period.
	RosterPollInterval Duration `json:"rosterPollInterval"`
}

// KeystoreSource is a go-ethereum keystore directory.
type KeystoreSource struct {
	Dir string `json:"dir"`
	// Addresses to unlock; empty means every account in Dir.
	Addresses []string `json:"addresses"`
	// RosterOnly: Dir holds the keys of signers added through the roster (the admin API)
	// only. Nothing in it is unlocked at start, so a key file put there serves only once
	// an operator adds its signer; Addresses must then be empty.
	RosterOnly bool `json:"rosterOnly"`
	// The passphrase comes from a file (first line) or an environment variable, never from
	// the configuration itself.
	PassphraseFile string `json:"passphraseFile"`
	PassphraseEnv  string `json:"passphraseEnv"`
}

// ExternalSource is a clef-compatible signer reached over JSON-RPC (account_signTransaction).
type ExternalSource struct {
	URL       string   `json:"url"`
	Addresses []string `json:"addresses"`
	// Timeout bounds one signing request; a signer that hangs fails that signer's pass
	// instead of holding it.
	Timeout Duration `json:"timeout"`
}

// check: the external signer's deadline, a keystore kept for the roster, the KMS sections, and a roster poll that makes an
// added signer serve on every node within one lease period.
func (s Signers) check(p *problems, environment string, leaseDuration Duration) {
	p.require(s.External.URL == "" || s.External.Timeout > 0, "signers.external.timeout", "must be positive")
	// Not quoted: its credentials may be in it.
	p.require(s.External.URL == "" || isJSONRPCURL(s.External.URL), "signers.external.url", "is not a JSON-RPC URL (http, https, ws or wss, and a host)")
	p.require(!s.Keystore.RosterOnly || s.Keystore.Dir != "", "signers.keystore.dir", "required with signers.keystore.rosterOnly")
	p.require(!s.Keystore.RosterOnly || len(s.Keystore.Addresses) == 0, "signers.keystore.addresses",
		"must be empty with signers.keystore.rosterOnly: the roster names the accounts unlocked from the directory")
	p.add(s.kmsProblems(environment)...)
	p.require(s.RosterPollInterval > 0 && s.RosterPollInterval <= leaseDuration,
		"signers.rosterPollInterval", "(%s) must be positive and at most lease.duration (%s): a signer added serves on every node within one lease period",
		s.RosterPollInterval.Std(), leaseDuration.Std())
}

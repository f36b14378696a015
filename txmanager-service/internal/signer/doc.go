// Package signer holds the keys the service signs with and answers which signers it
// manages. Keys come from sources: raw development keys, a go-ethereum keystore directory,
// a clef-compatible external signer, or secp256k1 keys in AWS KMS or Google Cloud KMS. A
// Registry joins the sources and implements the services.TxSigner and
// services.SignerDirectory ports.
//
// Every source may be called from many goroutines at once, and every remote one bounds
// each call with its own deadline whatever the caller's context allows.
//
// Key material never leaves a source: no error, log line or String method in this package
// includes a private key or a passphrase.
//
// It imports domain and conf; the Registry satisfies the services ports without importing
// them, and app assembles it.
package signer

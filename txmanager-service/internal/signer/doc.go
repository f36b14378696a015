// Package signer holds the keys the service signs with and answers which signers it
// manages. Keys come from sources: raw development keys, a go-ethereum keystore directory,
// or a clef-compatible external signer. A Registry joins the sources and implements the
// services.TxSigner and services.SignerDirectory ports.
//
// Key material never leaves a source: no error, log line or String method in this package
// includes a private key or a passphrase.
//
// It imports domain and conf; the Registry satisfies the services ports without importing
// them, and app assembles it.
package signer

// Package console is the operator console at /console: server-rendered pages over the same
// use cases as the API, readable without JavaScript, signed in with the API's credentials.
// Reads show what the credential's signers allow; actions go through the API's controllers,
// so they are authorised, forwarded to a signer's owner and audited exactly as API calls are.
package console

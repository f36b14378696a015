// Package controllers maps the API's protobuf messages to use-case calls and back, and
// domain errors to API errors (errors.go, the one mapping). Nothing else lives here.
//
// It imports services, domain, conf (the auth settings) and the API module; the servers
// call it.
package controllers

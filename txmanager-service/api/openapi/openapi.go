// Package openapi ships the OpenAPI 3 document of txmanager-service's HTTP API, generated
// from the protos (make generate): callers in other languages generate clients from it,
// and the service serves it at GET /openapi.yaml.
package openapi

import _ "embed"

// YAML is the document (openapi.yaml beside this file).
//
//go:embed openapi.yaml
var YAML []byte

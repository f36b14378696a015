package server

import (
	nethttp "net/http"

	"github.com/bionicotaku/txmanager-service/api/openapi"
)

// OpenAPIPath is where the service serves the OpenAPI document of its HTTP API (the one
// the API module ships), without credentials: it describes the API, it holds no data.
const OpenAPIPath = "/openapi.yaml"

func serveOpenAPI(w nethttp.ResponseWriter, r *nethttp.Request) {
	if r.Method != nethttp.MethodGet && r.Method != nethttp.MethodHead {
		methodNotAllowed(w, r)
		return
	}
	w.Header().Set("Content-Type", "application/yaml")
	_, _ = w.Write(openapi.YAML)
}

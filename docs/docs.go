// Package docs is the documentation that ships inside the binary: the public API's OpenAPI
// document (openapi.yaml, the contract; the server serves it as JSON at GET /v1/openapi.json).
// Its tests hold docs/api.md to openapi.yaml and every relative Markdown link of the repository
// to a file that exists.
package docs

import _ "embed"

// OpenAPI is docs/openapi.yaml as written. internal/api's tests hold it to the server's route
// table and to the wire types of internal/wire/v1.
//
//go:embed openapi.yaml
var OpenAPI []byte

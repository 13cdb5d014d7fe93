package api

import (
	"net/http"

	"sigs.k8s.io/yaml"

	"github.com/pandastack/pandastack/docs"
)

// openAPIJSON is docs/openapi.yaml as JSON, converted once: the document is part of the binary,
// and the tests parse the same bytes, so a conversion that fails cannot ship.
var openAPIJSON = func() []byte {
	b, err := yaml.YAMLToJSON(docs.OpenAPI)
	if err != nil {
		panic("docs/openapi.yaml: " + err.Error())
	}
	return b
}()

// openAPI answers the API's own description (no key needed: it holds no secret).
func (s *Server) openAPI(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	w.Write(openAPIJSON)
}

// Package templates holds the catalog's template specs (one YAML file each, see
// docs/templates.md) and the files they copy in, embedded into the binary.
package templates

import "embed"

// FS holds the specs (*.yaml) and their src files.
//
//go:embed *.yaml claude-agent code-interpreter
var FS embed.FS

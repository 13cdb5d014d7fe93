package template

import (
	"encoding/base64"
	"fmt"
	"io/fs"
	"path"
	"sort"
	"strings"
	"sync"
	"unicode/utf8"

	"github.com/pandastack/pandastack/templates"
)

// ReadSrc replaces each file's Src with its content, read by read (relative to the spec's
// directory). The CLI does this with the local disk, the catalog with its embedded files.
func ReadSrc(s *Spec, read func(name string) ([]byte, error)) error {
	for i := range s.Files {
		f := &s.Files[i]
		if f.Src == "" {
			continue
		}
		data, err := read(f.Src)
		if err != nil {
			return fmt.Errorf("template %s: files[%d]: %v", s.Name, i, err)
		}
		if len(data) > MaxFileBytes {
			return fmt.Errorf("template %s: %s is %d bytes; the limit is %d", s.Name, f.Src, len(data), MaxFileBytes)
		}
		if utf8.Valid(data) {
			f.Content = string(data)
		} else {
			f.ContentBase64 = base64.StdEncoding.EncodeToString(data)
		}
		f.Src = ""
	}
	return nil
}

var (
	catalogOnce sync.Once
	catalog     map[string]Spec
	aliases     map[string]string
	catalogErr  error
)

func loadCatalog() {
	catalog, aliases = map[string]Spec{}, map[string]string{}
	names, _ := fs.Glob(templates.FS, "*.yaml")
	for _, n := range names {
		data, err := templates.FS.ReadFile(n)
		if err != nil {
			catalogErr = err
			return
		}
		s, err := Parse(data)
		if err == nil {
			err = ReadSrc(&s, func(name string) ([]byte, error) {
				return templates.FS.ReadFile(path.Clean(name))
			})
		}
		if err == nil {
			err = s.Validate()
		}
		if err == nil && s.Name+".yaml" != n {
			err = fmt.Errorf("%s names template %q", n, s.Name)
		}
		if err != nil {
			catalogErr = fmt.Errorf("catalog %s: %v", n, err)
			return
		}
		catalog[s.Name] = s
		for _, a := range s.Aliases {
			aliases[a] = s.Name
		}
	}
}

// Catalog returns the built-in templates by name (a copy: callers may change it).
func Catalog() map[string]Spec {
	catalogOnce.Do(loadCatalog)
	if catalogErr != nil {
		panic(catalogErr) // the embedded catalog is part of the binary: TestCatalog keeps it valid
	}
	out := make(map[string]Spec, len(catalog))
	for k, v := range catalog {
		out[k] = v
	}
	return out
}

// Canonical resolves a catalog alias (postgres-16 → postgres-17); other names are returned as
// they are.
func Canonical(name string) string {
	catalogOnce.Do(loadCatalog)
	if c, ok := aliases[name]; ok {
		return c
	}
	return name
}

// CatalogSpec returns a catalog template by name or alias.
func CatalogSpec(name string) (Spec, bool) {
	s, ok := Catalog()[Canonical(name)]
	return s, ok
}

// CatalogNames lists the catalog's template names, sorted.
func CatalogNames() []string {
	var out []string
	for n := range Catalog() {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

// IsReserved reports whether a team may not name its own template n (catalog names and aliases).
func IsReserved(n string) bool {
	_, ok := CatalogSpec(n)
	return ok || strings.HasPrefix(n, "pandastack")
}

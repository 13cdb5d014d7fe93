package docs

import (
	"bytes"
	"flag"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

var update = flag.Bool("update", false, "rewrite docs/api.md from docs/openapi.yaml")

// TestAPIDoc holds docs/api.md to docs/openapi.yaml: api.md is renderAPI's output
// (`go test ./docs -run TestAPIDoc -update` rewrites it).
func TestAPIDoc(t *testing.T) {
	got, err := renderAPI(OpenAPI)
	if err != nil {
		t.Fatal(err)
	}
	if *update {
		if err := os.WriteFile("api.md", got, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	have, err := os.ReadFile("api.md")
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(have, got) {
		t.Fatal("docs/api.md is not openapi.yaml rendered: run go test ./docs -run TestAPIDoc -update")
	}
}

type (
	obj = map[string]any
	arr = []any
)

func str(v any) string { s, _ := v.(string); return s }

// refName is the last part of a "#/components/…/Name" reference.
func refName(ref string) string { return ref[strings.LastIndex(ref, "/")+1:] }

// typeText words a schema in a table cell: a link to an object, or its JSON type.
func typeText(s obj) string {
	if ref := str(s["$ref"]); ref != "" {
		return fmt.Sprintf("[%s](#%s)", refName(ref), strings.ToLower(refName(ref)))
	}
	var t string
	switch v := s["type"].(type) {
	case string:
		t = v
	case arr:
		var parts []string
		for _, x := range v {
			parts = append(parts, str(x))
		}
		t = strings.Join(parts, " \\| ")
	}
	switch t {
	case "array":
		items, _ := s["items"].(obj)
		return "array of " + typeText(items)
	case "object":
		if ap, ok := s["additionalProperties"].(obj); ok {
			return "map of " + typeText(ap)
		}
	}
	return t
}

// renderAPI renders an OpenAPI document as Markdown: the description, each tag's operations,
// then the objects.
func renderAPI(src []byte) ([]byte, error) {
	var doc obj
	if err := yaml.Unmarshal(src, &doc); err != nil {
		return nil, err
	}
	info, _ := doc["info"].(obj)
	comps, _ := doc["components"].(obj)
	params, _ := comps["parameters"].(obj)
	var b strings.Builder
	fmt.Fprintf(&b, "# %s (v%s)\n\n", str(info["title"]), str(info["version"]))
	b.WriteString("<!-- Rendered from openapi.yaml by docs_test.go: go test ./docs -run TestAPIDoc -update -->\n\n")
	b.WriteString("The machine-readable contract is [openapi.yaml](openapi.yaml) (OpenAPI 3.1), also served at `GET /v1/openapi.json`.\n\n")
	b.WriteString(strings.TrimSpace(str(info["description"])) + "\n")

	type op struct{ method, path string }
	byTag := map[string][]op{}
	paths, _ := doc["paths"].(obj)
	for p, item := range paths {
		for m, o := range item.(obj) {
			if oo, ok := o.(obj); ok && m != "parameters" {
				tags, _ := oo["tags"].(arr)
				byTag[str(tags[0])] = append(byTag[str(tags[0])], op{m, p})
			}
		}
	}
	order := []string{"get", "post", "put", "delete"}
	tags, _ := doc["tags"].(arr)
	for _, tg := range tags {
		name := str(tg.(obj)["name"])
		ops := byTag[name]
		sort.Slice(ops, func(i, j int) bool {
			if ops[i].path != ops[j].path {
				return ops[i].path < ops[j].path
			}
			return slices.Index(order, ops[i].method) < slices.Index(order, ops[j].method)
		})
		fmt.Fprintf(&b, "\n## Calls: %s\n", name)
		if d := str(tg.(obj)["description"]); d != "" {
			fmt.Fprintf(&b, "\n%s\n", d)
		}
		for _, o := range ops {
			item := paths[o.path].(obj)
			oo := item[o.method].(obj)
			fmt.Fprintf(&b, "\n### `%s %s`\n\n%s", strings.ToUpper(o.method), o.path, str(oo["summary"]))
			if sec, ok := oo["security"].(arr); ok && len(sec) == 0 {
				b.WriteString(" (no key)")
			}
			b.WriteString(".\n")
			if d := strings.TrimSpace(str(oo["description"])); d != "" {
				fmt.Fprintf(&b, "\n%s\n", d)
			}
			var ps []string
			all, _ := item["parameters"].(arr)
			more, _ := oo["parameters"].(arr)
			for _, p := range append(slices.Clone(all), more...) {
				po := p.(obj)
				if ref := str(po["$ref"]); ref != "" {
					po = params[refName(ref)].(obj)
				}
				if str(po["in"]) == "query" {
					name := "`" + str(po["name"]) + "`"
					if po["required"] == true {
						name += " (required)"
					}
					ps = append(ps, name)
				}
			}
			b.WriteString("\n")
			if len(ps) > 0 {
				fmt.Fprintf(&b, "- Query: %s\n", strings.Join(ps, ", "))
			}
			if rb, ok := oo["requestBody"].(obj); ok {
				content, _ := rb["content"].(obj)
				fmt.Fprintf(&b, "- Body: %s\n", contentText(content))
			}
			resps, _ := oo["responses"].(obj)
			for _, c := range slices.Sorted(maps.Keys(resps)) {
				r := resps[c].(obj)
				if c == "default" {
					b.WriteString("- Errors: [ErrorBody](#errorbody)\n")
					continue
				}
				content, _ := r["content"].(obj)
				if len(content) == 0 {
					fmt.Fprintf(&b, "- %s: %s\n", c, str(r["description"]))
				} else {
					fmt.Fprintf(&b, "- %s: %s\n", c, contentText(content))
				}
			}
		}
	}

	b.WriteString("\n## Objects\n")
	schemas, _ := comps["schemas"].(obj)
	for _, n := range slices.Sorted(maps.Keys(schemas)) {
		s := schemas[n].(obj)
		fmt.Fprintf(&b, "\n### %s\n\n", n)
		if d := strings.TrimSpace(str(s["description"])); d != "" {
			fmt.Fprintf(&b, "%s\n\n", strings.ReplaceAll(d, "\n", " "))
		}
		props, _ := s["properties"].(obj)
		req, _ := s["required"].(arr)
		b.WriteString("| field | type | always | notes |\n|---|---|---|---|\n")
		for _, p := range slices.Sorted(maps.Keys(props)) {
			ps := props[p].(obj)
			always := ""
			if slices.Contains(req, any(p)) {
				always = "yes"
			}
			notes := str(ps["description"])
			for _, k := range []string{"enum", "minimum", "maximum", "maxLength", "maxItems", "maxProperties", "default"} {
				if v, ok := ps[k]; ok {
					notes = strings.TrimPrefix(notes+fmt.Sprintf("; %s %v", k, v), "; ")
				}
			}
			fmt.Fprintf(&b, "| `%s` | %s | %s | %s |\n", p, typeText(ps), always, strings.ReplaceAll(notes, "|", "\\|"))
		}
	}
	return []byte(b.String()), nil
}

// contentText words a request or response content: each media type and its schema.
func contentText(content obj) string {
	var out []string
	for _, mt := range slices.Sorted(maps.Keys(content)) {
		s, _ := content[mt].(obj)["schema"].(obj)
		out = append(out, fmt.Sprintf("%s (`%s`)", typeText(s), mt))
	}
	return strings.Join(out, ", ")
}

var mdLink = regexp.MustCompile(`\]\(([^)\s]+)\)`)

// TestLinks: every relative link of the repository's Markdown (README.md, docs/, sdk/) names a
// file or directory inside the repository.
func TestLinks(t *testing.T) {
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	files := []string{filepath.Join(root, "README.md")}
	for _, dir := range []string{"docs", "sdk"} {
		filepath.WalkDir(filepath.Join(root, dir), func(p string, d os.DirEntry, err error) error {
			if d != nil && d.IsDir() && d.Name() == "node_modules" {
				return filepath.SkipDir
			}
			if err == nil && strings.HasSuffix(p, ".md") {
				files = append(files, p)
			}
			return nil
		})
	}
	checked := 0
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range mdLink.FindAllStringSubmatch(string(b), -1) {
			target, _, _ := strings.Cut(m[1], "#")
			if target == "" || strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
				continue
			}
			checked++
			abs := filepath.Join(filepath.Dir(f), target)
			rel, _ := filepath.Rel(root, f)
			if r, err := filepath.Rel(root, abs); err != nil || strings.HasPrefix(r, "..") {
				t.Errorf("%s: link %s leaves the repository", rel, m[1])
			} else if _, err := os.Stat(abs); err != nil {
				t.Errorf("%s: link %s names no file", rel, m[1])
			}
		}
	}
	if checked == 0 {
		t.Fatal("no links found: the check reads nothing")
	}
}

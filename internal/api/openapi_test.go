package api

import (
	"encoding/json"
	"go/ast"
	"go/parser"
	"go/token"
	"io"
	"net/http"
	"reflect"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/pandastack/pandastack/internal/network"
	v1 "github.com/pandastack/pandastack/internal/wire/v1"
)

// openAPIDoc is the part of docs/openapi.yaml the contract test reads.
type openAPIDoc struct {
	Paths      map[string]map[string]json.RawMessage `json:"paths"`
	Components struct {
		Schemas map[string]schema `json:"schemas"`
	} `json:"components"`
}

type schema struct {
	Type                 any                `json:"type"` // a name, or [name, "null"]
	Ref                  string             `json:"$ref"`
	Properties           map[string]*schema `json:"properties"`
	Required             []string           `json:"required"`
	Items                *schema            `json:"items"`
	AdditionalProperties any                `json:"additionalProperties"`
}

func loadOpenAPI(t *testing.T) openAPIDoc {
	t.Helper()
	var doc openAPIDoc
	if err := json.Unmarshal(openAPIJSON, &doc); err != nil {
		t.Fatalf("docs/openapi.yaml as JSON: %v", err)
	}
	return doc
}

// TestOpenAPIRoutes holds docs/openapi.yaml's paths to the server's route table, both ways.
func TestOpenAPIRoutes(t *testing.T) {
	doc := loadOpenAPI(t)
	var server, documented []string
	for _, rt := range (&Server{}).routeTable() {
		server = append(server, rt.method+" "+rt.path)
	}
	methods := []string{"get", "put", "post", "delete", "patch", "head", "options"}
	for p, item := range doc.Paths {
		for m := range item {
			if slices.Contains(methods, m) {
				documented = append(documented, strings.ToUpper(m)+" "+p)
			}
		}
	}
	for _, r := range server {
		if !slices.Contains(documented, r) {
			t.Errorf("route %s is served but not in docs/openapi.yaml", r)
		}
	}
	for _, r := range documented {
		if !slices.Contains(server, r) {
			t.Errorf("docs/openapi.yaml has %s, which the server does not serve", r)
		}
	}
}

// wireTypes are the types whose JSON docs/openapi.yaml describes, by schema name (the Go name): every struct
// of internal/wire/v1 (TestOpenAPIKnowsEveryWireType checks that none is missing) and the
// egress policy a create takes.
var wireTypes = func() map[string]reflect.Type {
	m := map[string]reflect.Type{}
	for _, v := range []any{
		network.Egress{}, v1.AppBuild{}, v1.AppPlan{}, v1.AppSpec{}, v1.App{}, v1.Apps{}, v1.Deployment{},
		v1.Deployments{}, v1.AppPreview{}, v1.AppPreviews{}, v1.RollbackRequest{}, v1.GitHubConnectRequest{}, v1.GitHubHook{}, v1.WebhookResult{},
		v1.ErrorBody{}, v1.ErrorDetail{}, v1.Sandbox{}, v1.SandboxPage{}, v1.SandboxMetrics{}, v1.TermSize{},
		v1.CreateWebhookRequest{}, v1.Webhook{}, v1.Webhooks{}, v1.WebhookDelivery{}, v1.WebhookDeliveries{}, v1.WebhookEvent{},
		v1.Sandboxes{}, v1.Event{}, v1.Change{}, v1.TerminalTicket{}, v1.CreateRequest{}, v1.VolumeMount{}, v1.TTLRequest{}, v1.ForkRequest{},
		v1.ExecRequest{}, v1.ExecResult{}, v1.ExecEvent{}, v1.Stat{}, v1.Entries{}, v1.PathRequest{},
		v1.MoveRequest{}, v1.Snapshot{}, v1.SnapshotPage{}, v1.Template{}, v1.Templates{},
		v1.BuildEvent{}, v1.Volume{}, v1.VolumeAttachment{}, v1.Volumes{}, v1.CreateVolumeRequest{},
		v1.ResizeVolumeRequest{}, v1.Key{}, v1.Keys{}, v1.CreateKeyRequest{}, v1.Team{},
		v1.CreateTeamRequest{}, v1.NewTeam{}, v1.Info{}, v1.EgressInfo{}, v1.Range{}, v1.AuditEntry{}, v1.AuditPage{},
		v1.Usage{}, v1.UsageItem{}, v1.QuotaRequest{}, v1.Host{}, v1.Hosts{}, v1.DrainReport{}, v1.KeptSandbox{}, v1.DoctorReport{}, v1.DoctorFinding{},
		v1.StartProcessRequest{}, v1.ProcessStarted{}, v1.Process{},
		v1.Processes{}, v1.ProcessEvent{}, v1.ProcessExit{}, v1.DatabaseEvent{}, v1.StdinRequest{}, v1.SignalRequest{}, v1.TerminalMessage{},
		v1.WatchEvent{}, v1.ArchiveResult{},
		v1.CodeRequest{}, v1.CodeResult{}, v1.CodeError{}, v1.CodeEnd{},
		v1.CodeEvent{}, v1.CodeLogs{}, v1.CodeExecution{}, v1.CodeContext{}, v1.CreateCodeContextRequest{}, v1.CodeContextList{},
		v1.CodeInterruptRequest{},
		v1.Function{}, v1.Functions{}, v1.FunctionSpec{}, v1.FunctionVersion{}, v1.FunctionVersions{}, v1.InvokeRequest{},
		v1.FunctionError{}, v1.FunctionRun{}, v1.FunctionRuns{}, v1.Schedule{}, v1.Schedules{}, v1.CreateScheduleRequest{},
		v1.ScheduleRun{}, v1.ScheduleRuns{}, v1.Database{}, v1.Databases{}, v1.DatabaseConnection{}, v1.DatabaseSpec{},
		v1.QueryRequest{}, v1.QueryField{}, v1.QueryResult{}, v1.QueryBatch{}, v1.QueryError{}, v1.BranchRequest{}, v1.DatabaseStats{},
		v1.DatabaseBackup{}, v1.DatabaseBackups{}, v1.RestoreRequest{},
	} {
		t := reflect.TypeOf(v)
		m[t.Name()] = t
	}
	return m
}()

// TestOpenAPIKnowsEveryWireType fails when internal/wire/v1 gains a struct wireTypes (and so
// the document) does not describe.
func TestOpenAPIKnowsEveryWireType(t *testing.T) {
	fs := token.NewFileSet()
	pkgs, err := parser.ParseDir(fs, "../wire/v1", nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range pkgs {
		for _, f := range p.Files {
			for _, d := range f.Decls {
				g, ok := d.(*ast.GenDecl)
				if !ok || g.Tok != token.TYPE {
					continue
				}
				for _, sp := range g.Specs {
					ts := sp.(*ast.TypeSpec)
					if _, isStruct := ts.Type.(*ast.StructType); isStruct && ts.Name.IsExported() {
						if typ, ok := wireTypes[ts.Name.Name]; !ok || typ.PkgPath() != reflect.TypeFor[v1.Sandbox]().PkgPath() {
							t.Errorf("v1.%s is not in wireTypes: add it and its schema to docs/openapi.yaml", ts.Name.Name)
						}
					}
				}
			}
		}
	}
}

// TestOpenAPISchemas holds every wire type's JSON fields to its schema's properties, both ways,
// with their JSON types; a required property must be a field that is never left out.
func TestOpenAPISchemas(t *testing.T) {
	doc := loadOpenAPI(t)
	names := make([]string, 0, len(wireTypes))
	for n := range wireTypes {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, name := range names {
		typ := wireTypes[name]
		sch, ok := doc.Components.Schemas[name]
		if !ok {
			t.Errorf("docs/openapi.yaml has no schema %s (for %s)", name, typ)
			continue
		}
		fields := jsonFields(typ)
		for fname, f := range fields {
			p, ok := sch.Properties[fname]
			if !ok {
				t.Errorf("%s: field %q of %s is not in the schema", name, fname, typ)
				continue
			}
			if msg := matchType(p, f.typ, !f.omitempty); msg != "" {
				t.Errorf("%s.%s: %s", name, fname, msg)
			}
		}
		for pname := range sch.Properties {
			if _, ok := fields[pname]; !ok {
				t.Errorf("%s: the schema has property %q, which %s does not have", name, pname, typ)
			}
		}
		for _, r := range sch.Required {
			if f, ok := fields[r]; ok && f.omitempty {
				t.Errorf("%s: %q is required in the schema but omitempty in %s", name, r, typ)
			}
		}
	}
}

type jsonField struct {
	typ       reflect.Type
	omitempty bool
}

// jsonFields is what encoding/json makes of t's fields (embedded structs flattened).
func jsonFields(t reflect.Type) map[string]jsonField {
	out := map[string]jsonField{}
	for _, f := range reflect.VisibleFields(t) {
		if !f.IsExported() || (f.Anonymous && f.Type.Kind() == reflect.Struct) {
			continue
		}
		tag := f.Tag.Get("json")
		if tag == "-" {
			continue
		}
		name, opts, _ := strings.Cut(tag, ",")
		if name == "" {
			name = f.Name
		}
		out[name] = jsonField{typ: f.Type, omitempty: strings.Contains(opts, "omitempty")}
	}
	return out
}

// matchType says how p fails to describe Go type t ("" if it does). A pointer that is never
// left out can be null on the wire, so its schema must allow null.
func matchType(p *schema, t reflect.Type, alwaysThere bool) string {
	if t == reflect.TypeFor[json.RawMessage]() || t.Kind() == reflect.Interface {
		if p.Type != nil || p.Ref != "" {
			return "raw JSON (any value) has a schema without type"
		}
		return ""
	}
	if t.Kind() == reflect.Pointer {
		if alwaysThere && !schemaTypes(p)["null"] {
			return "a pointer that is never left out can be null: type [T, \"null\"]"
		}
		t = t.Elem()
	}
	if t.Kind() == reflect.Struct {
		if want := "#/components/schemas/" + t.Name(); p.Ref != want {
			return "want $ref " + want + ", got " + p.Ref
		}
		return ""
	}
	want := map[reflect.Kind]string{reflect.String: "string", reflect.Bool: "boolean", reflect.Map: "object",
		reflect.Slice: "array", reflect.Float32: "number", reflect.Float64: "number"}[t.Kind()]
	if t.Kind() >= reflect.Int && t.Kind() <= reflect.Uint64 {
		want = "integer"
	}
	if !schemaTypes(p)[want] {
		return "want type " + want + " for " + t.String()
	}
	switch t.Kind() {
	case reflect.Slice:
		if p.Items == nil {
			return "an array needs items"
		}
		if msg := matchType(p.Items, t.Elem(), false); msg != "" {
			return "items: " + msg
		}
	case reflect.Map:
		ap, ok := p.AdditionalProperties.(map[string]any)
		if !ok || ap["type"] != "string" || t.Elem().Kind() != reflect.String {
			return "a map needs additionalProperties {type: string}"
		}
	}
	return ""
}

func schemaTypes(p *schema) map[string]bool {
	out := map[string]bool{}
	switch v := p.Type.(type) {
	case string:
		out[v] = true
	case []any:
		for _, x := range v {
			out[x.(string)] = true
		}
	}
	return out
}

// TestOpenAPIServed: GET /v1/openapi.json needs no key and answers the document as JSON.
func TestOpenAPIServed(t *testing.T) {
	e := newEnv(t)
	resp, err := http.Get(e.hs.URL + "/v1/openapi.json")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	var doc map[string]any
	if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "application/json" || json.Unmarshal(body, &doc) != nil {
		t.Fatalf("GET /v1/openapi.json: %d %s %.200s", resp.StatusCode, resp.Header.Get("Content-Type"), body)
	}
	if doc["openapi"] != "3.1.0" {
		t.Fatalf("openapi = %v", doc["openapi"])
	}
}

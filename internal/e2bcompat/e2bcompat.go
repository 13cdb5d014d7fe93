// Package e2bcompat is the E2B-compatible facade (docs/e2b.md): the unchanged npm `e2b` and
// `@e2b/code-interpreter` SDKs work against PandaStack when E2B_API_URL and E2B_SANDBOX_URL
// point at its listener (`up --e2b-addr`, `server --e2b-addr`) and E2B_API_KEY is a key from
// `pandastack keys create --e2b`.
//
// One listener, two planes, told apart as E2B's own proxy does: a request without the
// E2b-Sandbox-Id header is E2B's control API (sandboxes, snapshots, X-API-KEY; through the /v1
// API's quotas, rate limits and audit log); with it (or with a Host <port>-<id>.<domain>), the
// data plane of that sandbox's E2b-Sandbox-Port: 49983 is envd (Connect RPCs of process.Process and
// filesystem.Filesystem, /files, /health; X-Access-Token), 49999 the code interpreter (/execute,
// /contexts) and any other port goes through PandaStack's port proxy. Everything is translated
// onto PandaStack's services: the sandbox service (create, kill, ttl, hibernate, wake, fork,
// snapshot), the host's processes, files and terminals as the /v1 API reaches them, and
// internal/codeinterp's kernels. There is no second process or kernel mechanism and no envd in
// the guest. The facade's own state is a sandbox's envd access token and timeout policy (store,
// e2b_sandboxes), and in memory its open PTYs and polling watchers.
//
// Sandbox ids: E2B's must be lowercase [a-z0-9] (the SDK builds <port>-<id>.<domain> host names),
// so the facade's id is PandaStack's without its "sb_" prefix, and back (ToE2B, FromE2B).
package e2bcompat

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/pandastack/pandastack/internal/agentclient"
	"github.com/pandastack/pandastack/internal/auth"
	"github.com/pandastack/pandastack/internal/errdefs"
	"github.com/pandastack/pandastack/internal/sandboxes"
	"github.com/pandastack/pandastack/internal/store"
	"github.com/pandastack/pandastack/internal/templates"
)

// EnvdVersion is the envd version the facade advertises: the highest whose features it really
// serves. 0.5.7 brings CloseStdin (0.5.2) and octet-stream and gzip uploads; the SDKs send no
// Authorization header from 0.4.0 on (the guest's default user, "user", runs everything).
const EnvdVersion = "0.5.7"

// Ports of the data plane.
const (
	EnvdPort = 49983
	CodePort = 49999
)

// Headers of the E2B wire protocol.
const (
	headerAPIKey      = "X-API-KEY"
	headerSandboxID   = "E2b-Sandbox-Id"
	headerSandboxPort = "E2b-Sandbox-Port"
	headerAccessToken = "X-Access-Token"
	headerNextToken   = "X-Next-Token"
)

// clientID is E2B's deprecated clientID: required by the SDKs, any constant does.
const clientID = "pandastack"

// Backend is what the facade uses of the control plane: the services, and the checks and the
// port proxy of the /v1 API that a create or a proxied request must go through too. The API
// server builds it (api.Server.E2BBackend).
type Backend struct {
	Store     *store.Store
	Sandboxes *sandboxes.Service
	Templates *templates.Service
	Auth      *auth.Authenticator
	// HoldQuota holds n more sandboxes of tmpl against the team's quota while a create or fork
	// runs (the /v1 API's check); release after the sandboxes are recorded.
	HoldQuota func(ctx context.Context, teamID, tmpl string, n int64) (release func(), err error)
	// TemplateSize is a template's vCPUs and memory as the team sees it.
	TemplateSize func(ctx context.Context, teamID, tmpl string) (vcpus, memMiB int64, err error)
	// CheckMetadata and CheckEnv validate metadata and environment variables (named field in
	// messages) as /v1 does.
	CheckMetadata func(map[string]string) error
	CheckEnv      func(field string, env map[string]string) error
	// Guard wraps a control-API route (method, pattern; isCreate for creates, forks and
	// snapshots) in the /v1 API's per-key rate limit (refusals answered with writeErr) and audit
	// log; the request's context carries the caller (auth.WithIdentity).
	Guard func(method, pattern string, isCreate bool, writeErr func(http.ResponseWriter, *http.Request, error), h http.Handler) http.Handler
	// DataGuard wraps a data-plane call of sandboxID (team teamID) in the team's rate limit
	// (refusals answered with writeErr) and, when mutating, the audit log (route "e2b " + what,
	// never a body).
	DataGuard func(teamID, sandboxID, method, what string, mutating bool, writeErr func(http.ResponseWriter, *http.Request, error), h http.Handler) http.Handler
	// Proxy forwards r to port of sandbox (PandaStack's id) through the port proxy.
	Proxy          func(w http.ResponseWriter, r *http.Request, port int, sandboxID string)
	MaxUploadBytes int64
	MaxTTL         time.Duration
	Logger         *slog.Logger
}

// Server is the facade's HTTP handler. Create with New.
type Server struct {
	b       Backend
	log     *slog.Logger
	control *http.ServeMux
	envd    *http.ServeMux
	code    *http.ServeMux
}

// New builds the facade over b.
func New(b Backend) *Server {
	if b.Logger == nil {
		b.Logger = slog.Default()
	}
	s := &Server{b: b, log: b.Logger}
	s.control = s.controlRoutes()
	s.envd = s.envdRoutes()
	s.code = s.codeRoutes()
	return s
}

// ServeHTTP routes a request to the control API or, with E2b-Sandbox-Id, to the sandbox's port.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	defer func() {
		if v := recover(); v != nil {
			if v == http.ErrAbortHandler {
				panic(v)
			}
			s.log.Error("e2b facade: panic", "path", r.URL.Path, "panic", v)
			writeError(w, errdefs.New(errdefs.Internal, "internal error"))
		}
	}()
	id := r.Header.Get(headerSandboxID)
	if id == "" {
		// E2B's host routing, <port>-<sandbox id>.<domain> (a wildcard name pointed at this
		// listener, e.g. behind a TLS proxy): what sbx.getHost(port) and older clients use.
		if port, hid, ok := hostTarget(r.Host); ok {
			s.dataPlane(w, r, hid, port)
			return
		}
		s.control.ServeHTTP(w, r)
		return
	}
	port := EnvdPort
	if p := r.Header.Get(headerSandboxPort); p != "" {
		n, err := strconv.Atoi(p)
		if err != nil || n < 1 || n > 65535 {
			writeError(w, errdefs.Invalidf("%s %q is not a TCP port", headerSandboxPort, truncate(p)))
			return
		}
		port = n
	}
	s.dataPlane(w, r, id, port)
}

var e2bIDPattern = regexp.MustCompile(`^[a-z0-9]{1,64}$`)

var hostPattern = regexp.MustCompile(`^([0-9]{1,5})-([a-z0-9]{1,64})\.`)

// hostTarget reads <port>-<id>.<domain>[:port] from a Host header.
func hostTarget(host string) (int, string, bool) {
	m := hostPattern.FindStringSubmatch(strings.ToLower(host))
	if m == nil {
		return 0, "", false
	}
	port, err := strconv.Atoi(m[1])
	if err != nil || port < 1 || port > 65535 {
		return 0, "", false
	}
	return port, m[2], true
}

// ToE2B is a sandbox's id as the facade shows it: PandaStack's without its "sb_" prefix.
func ToE2B(id string) string { return strings.TrimPrefix(id, "sb_") }

// FromE2B is PandaStack's id of a facade id, or false for text that cannot be one.
func FromE2B(id string) (string, bool) {
	if !e2bIDPattern.MatchString(id) {
		return "", false
	}
	return "sb_" + id, true
}

func truncate(s string) string { return sandboxes.Truncate(s) }

// errorBody is E2B's control-API error: code is the HTTP status (the SDK branches on it).
type errorBody struct {
	Code    int    `json:"code"`
	Message string `json:"message"`
}

// answerOf is the status and message to show for err; faults of ours are logged, not shown.
func answerOf(err error) (int, string) {
	var age *agentclient.Error
	if errors.As(err, &age) && age.Status != http.StatusUnauthorized && age.Status != http.StatusInternalServerError {
		e := age.Def()
		return e.Kind.Status(), e.Message
	}
	var ue *agentclient.Unreachable
	if errors.As(err, &ue) {
		return http.StatusBadGateway, "the sandbox's host did not answer; retry later"
	}
	if e, ok := errdefs.As(err); ok && e.Kind != errdefs.Internal {
		return e.Kind.Status(), e.Message
	}
	if errors.Is(err, store.ErrBadCursor) {
		return http.StatusBadRequest, "nextToken is malformed: pass X-Next-Token from a previous page unchanged"
	}
	return http.StatusInternalServerError, "internal error"
}

// writeError answers err in E2B's error shape.
func writeError(w http.ResponseWriter, err error) {
	status, msg := answerOf(err)
	writeJSON(w, status, errorBody{Code: status, Message: msg})
}

// fail answers err, logging it when it is a fault of ours.
func (s *Server) fail(w http.ResponseWriter, r *http.Request, err error) {
	if status, _ := answerOf(err); status == http.StatusInternalServerError {
		s.log.Error("e2b facade", "method", r.Method, "path", r.URL.Path, "err", err)
	}
	writeError(w, err)
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	if v == nil {
		return
	}
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	enc.Encode(v)
}

// maxBody bounds a control-API request body.
const maxBody = 1 << 20

// decode reads a JSON body into v; an empty body leaves v as it is. Unknown fields are ignored:
// the SDKs send fields the facade does not act on (secure, network, mcp…).
func decode(w http.ResponseWriter, r *http.Request, v any) error {
	r.Body = http.MaxBytesReader(w, r.Body, maxBody)
	dec := json.NewDecoder(r.Body)
	if err := dec.Decode(v); err != nil {
		var mbe *http.MaxBytesError
		switch {
		case errors.Is(err, io.EOF):
			return nil
		case errors.As(err, &mbe):
			return errdefs.New(errdefs.TooLarge, "request body is larger than %d bytes", maxBody)
		}
		return errdefs.Invalidf("request body is not valid JSON: %v", err)
	}
	return nil
}

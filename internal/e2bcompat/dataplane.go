package e2bcompat

import (
	"context"
	"crypto/subtle"
	"encoding/base64"
	"errors"
	"net/http"
	"path"
	"regexp"
	"strings"

	"connectrpc.com/connect"

	"github.com/pandastack/pandastack/internal/agentclient"
	"github.com/pandastack/pandastack/internal/e2bcompat/proto/filesystem/filesystemconnect"
	"github.com/pandastack/pandastack/internal/e2bcompat/proto/process/processconnect"
	"github.com/pandastack/pandastack/internal/errdefs"
	"github.com/pandastack/pandastack/internal/sandboxes"
	"github.com/pandastack/pandastack/internal/store"
)

// The data plane: a request with E2b-Sandbox-Id, for that sandbox's port.

// maxRPCBytes bounds one Connect request message (a SendInput's data is at most 1 MiB of stdin,
// base64 in JSON).
const maxRPCBytes = 4 << 20

// target is the sandbox a data-plane request is for, and a client of its host.
type target struct {
	sb store.Sandbox
	c  *agentclient.Client
	// user is the guest account the call runs as ("" the default, "user").
	user string
}

// files are the file calls as the request's user.
func (t target) files() agentclient.Files { return t.c.FilesAs(t.user) }

type targetKey struct{}

func targetOf(ctx context.Context) target {
	t, _ := ctx.Value(targetKey{}).(target)
	return t
}

// dataPlane serves a request for (sandbox, port). An unknown or stopped sandbox is a 502, as
// E2B's proxy answers: the SDKs read it as "the sandbox is not running".
func (s *Server) dataPlane(w http.ResponseWriter, r *http.Request, e2bID string, port int) {
	sbID, ok := FromE2B(e2bID)
	var sb store.Sandbox
	err := store.ErrNotFound
	if ok {
		sb, err = s.b.Store.GetSandbox(r.Context(), sbID)
	}
	if errors.Is(err, store.ErrNotFound) {
		writeError(w, errdefs.New(errdefs.Unavailable, "sandbox %s is not running (no such sandbox)", truncate(e2bID)))
		return
	}
	if err != nil {
		s.fail(w, r, err)
		return
	}
	if err := sandboxes.Usable(sb); err != nil {
		writeError(w, errdefs.New(errdefs.Unavailable, "sandbox %s is not running: %v", e2bID, err))
		return
	}
	switch port {
	case EnvdPort:
		if r.URL.Path == "/health" {
			w.WriteHeader(http.StatusNoContent)
			return
		}
		s.serveTarget(w, r, sb, port, true, s.envd)
	case CodePort:
		// The code-interpreter SDK sends the token on /execute only.
		s.serveTarget(w, r, sb, port, r.URL.Path == "/execute", s.code)
	default:
		s.b.Proxy(w, r, port, sb.ID)
	}
}

// mutatingRPCs are the envd calls that change a sandbox, audited as /v1's equivalents are
// (process starts, stdin, signals, file changes); reads and watches are not.
var mutatingRPCs = map[string]bool{
	"/process.Process/Start": true, "/process.Process/SendInput": true, "/process.Process/CloseStdin": true,
	"/process.Process/SendSignal": true, "/process.Process/Update": true, "/process.Process/StreamInput": true,
	"/filesystem.Filesystem/MakeDir": true, "/filesystem.Filesystem/Move": true, "/filesystem.Filesystem/Remove": true,
}

var contextPath = regexp.MustCompile(`^/contexts/[^/]+(/restart)?$`)

// dataRoute names a data-plane call for the rate limit and the audit log (a bounded set of
// names: no ids, no file paths) and says whether it changes the sandbox.
func dataRoute(port int, r *http.Request) (what string, mutating bool) {
	p, post := r.URL.Path, r.Method == http.MethodPost
	if port == EnvdPort {
		switch {
		case mutatingRPCs[p]:
			return "envd " + p, true
		case p == "/files":
			return "envd /files", post
		}
		return "envd", false
	}
	switch {
	case p == "/execute" || p == "/contexts":
		return "code " + p, post
	case contextPath.MatchString(p):
		if strings.HasSuffix(p, "/restart") {
			return "code /contexts/{id}/restart", post
		}
		return "code /contexts/{id}", r.Method == http.MethodDelete
	}
	return "code", false
}

// serveTarget checks the sandbox's access token (when needed), finds its host and serves r
// with h, the target in its context, through the team's rate limit and (for a call that changes
// the sandbox) the audit log.
func (s *Server) serveTarget(w http.ResponseWriter, r *http.Request, sb store.Sandbox, port int, needToken bool, h http.Handler) {
	if needToken {
		tok, err := s.b.Store.E2BAccessToken(r.Context(), sb.TeamID, sb.ID, newAccessToken())
		if err != nil {
			s.fail(w, r, err)
			return
		}
		got := r.Header.Get(headerAccessToken)
		if got == "" || subtle.ConstantTimeCompare([]byte(got), []byte(tok)) != 1 {
			writeError(w, errdefs.New(errdefs.Unauthorized, "missing or wrong %s: send the sandbox's envdAccessToken (from create or connect)", headerAccessToken))
			return
		}
	}
	c, err := s.b.Sandboxes.Target(r.Context(), sb)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	t := target{sb: sb, c: c, user: basicUser(r)}
	if s.b.DataGuard != nil {
		what, mutating := dataRoute(port, r)
		h = s.b.DataGuard(sb.TeamID, sb.ID, r.Method, what, mutating, s.fail, h)
	}
	h.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), targetKey{}, t)))
	s.b.Sandboxes.Touched(context.WithoutCancel(r.Context()), sb, c, nil)
}

// basicUser is the user of an `Authorization: Basic base64(user:)` header (the SDK's way of
// choosing the account), or "".
func basicUser(r *http.Request) string {
	scheme, v, ok := strings.Cut(r.Header.Get("Authorization"), " ")
	if !ok || !strings.EqualFold(scheme, "Basic") {
		return r.URL.Query().Get("username")
	}
	b, err := base64.StdEncoding.DecodeString(strings.TrimSpace(v))
	if err != nil {
		return ""
	}
	u, _, _ := strings.Cut(string(b), ":")
	return u
}

// envdRoutes is envd's API: the two Connect services, /files.
func (s *Server) envdRoutes() *http.ServeMux {
	mux := http.NewServeMux()
	opts := []connect.HandlerOption{connect.WithReadMaxBytes(maxRPCBytes)}
	mux.Handle(processconnect.NewProcessHandler(&processService{s: s}, opts...))
	mux.Handle(filesystemconnect.NewFilesystemHandler(&filesystemService{s: s}, opts...))
	mux.HandleFunc("GET /files", s.readFile)
	mux.HandleFunc("POST /files", s.writeFiles)
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeError(w, errdefs.NotFoundf("envd: no route %s %s", r.Method, truncate(r.URL.Path)))
	})
	return mux
}

// homeOf is the home directory of a guest account.
func homeOf(user string) string {
	switch user {
	case "", "user":
		return "/home/user"
	case "root":
		return "/root"
	}
	return "/home/" + user
}

// absPath resolves p against the user's home, as envd does for relative paths.
func absPath(user, p string) string {
	if p == "" {
		return homeOf(user)
	}
	if strings.HasPrefix(p, "~/") || p == "~" {
		p = strings.TrimPrefix(strings.TrimPrefix(p, "~"), "/")
	}
	if !path.IsAbs(p) {
		p = path.Join(homeOf(user), p)
	}
	return p
}

// connectErr is err as a Connect error: its kind mapped to the Connect code the SDKs branch on
// (not_found, already_exists, unavailable…).
func connectErr(err error) error {
	if err == nil {
		return nil
	}
	var ce *connect.Error
	if errors.As(err, &ce) {
		return ce
	}
	if errors.Is(err, context.DeadlineExceeded) {
		return connect.NewError(connect.CodeDeadlineExceeded, err)
	}
	if errors.Is(err, context.Canceled) {
		return connect.NewError(connect.CodeCanceled, err)
	}
	status, msg := answerOf(err)
	return connect.NewError(connectErrCode(status), errors.New(msg))
}

// connectErrCode is the Connect code of an HTTP error status.
func connectErrCode(status int) connect.Code {
	code := connect.CodeInternal
	switch status {
	case http.StatusBadRequest:
		code = connect.CodeInvalidArgument
	case http.StatusUnauthorized:
		code = connect.CodeUnauthenticated
	case http.StatusForbidden:
		code = connect.CodePermissionDenied
	case http.StatusNotFound:
		code = connect.CodeNotFound
	case http.StatusConflict:
		code = connect.CodeFailedPrecondition
	case http.StatusRequestEntityTooLarge, http.StatusTooManyRequests, http.StatusInsufficientStorage:
		code = connect.CodeResourceExhausted
	case http.StatusNotImplemented:
		code = connect.CodeUnimplemented
	case http.StatusBadGateway, http.StatusServiceUnavailable:
		code = connect.CodeUnavailable
	}
	return code
}

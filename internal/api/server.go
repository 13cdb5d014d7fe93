// Package api is `pandastack server`'s HTTP handler: the public /v1 API of
// docs/openapi.yaml (sandboxes, exec, files, ttl, fork, snapshots, hibernate/wake, templates,
// keys, teams), the internal host API agents register and heartbeat through, /healthz and
// /metrics, plus the TTL reaper. It owns request ids, JSON error answers (errdefs kinds mapped
// once, in errors.go), body limits and input validation; its objects are internal/wire/v1's.
// Sandbox and volume operations (create, fork, snapshot, hibernate, wake, kill, volume changes)
// are the sandbox service's (internal/sandboxes), state lives in internal/store, placement in
// internal/scheduler, and exec and files are relayed to host agents through
// internal/agentclient (exec streams and file bodies pass through unbuffered).
package api

import (
	"cmp"
	"context"
	"crypto/subtle"
	"log/slog"
	"net/http"
	"net/netip"
	"regexp"
	"runtime/debug"
	"strings"
	"time"

	"github.com/pandastack/pandastack/internal/apps"
	"github.com/pandastack/pandastack/internal/auth"
	"github.com/pandastack/pandastack/internal/blob"
	"github.com/pandastack/pandastack/internal/database"
	"github.com/pandastack/pandastack/internal/defaults"
	"github.com/pandastack/pandastack/internal/errdefs"
	"github.com/pandastack/pandastack/internal/functions"
	"github.com/pandastack/pandastack/internal/inflight"
	"github.com/pandastack/pandastack/internal/mcptools"
	"github.com/pandastack/pandastack/internal/sandboxes"
	"github.com/pandastack/pandastack/internal/scheduler"
	"github.com/pandastack/pandastack/internal/schedules"
	"github.com/pandastack/pandastack/internal/store"
	"github.com/pandastack/pandastack/internal/templates"
	"github.com/pandastack/pandastack/internal/webhooks"
	v1 "github.com/pandastack/pandastack/internal/wire/v1"
)

// Defaults of Config.
const (
	DefaultTTL            = 300 * time.Second
	DefaultMaxTTL         = 86400 * time.Second
	DefaultMaxUploadBytes = 1 << 30
	DefaultReapInterval   = 250 * time.Millisecond
)

// Limits on user-supplied maps, documented in docs/control-plane.md.
const (
	MaxMetadataKeys     = 64
	MaxMetadataKeyLen   = 64
	MaxMetadataValueLen = 512
	MaxEnvKeys          = 64
	MaxEnvKeyLen        = 64
	MaxEnvValueLen      = 4096
	MaxListLimit        = 1000
	DefaultListLimit    = 100
)

// Config configures a Server.
type Config struct {
	Store     *store.Store
	Scheduler *scheduler.Scheduler
	Logger    *slog.Logger
	// DefaultTTL applies when a create gives no ttl_seconds (default 300 s); MaxTTL bounds
	// ttl_seconds (default 86400 s).
	DefaultTTL time.Duration
	MaxTTL     time.Duration
	// MaxUploadBytes bounds one file upload (default 1 GiB).
	MaxUploadBytes int64
	// ClusterToken authenticates agents on /internal/v1/hosts/*; empty disables that API.
	ClusterToken string
	// ReapInterval is how often expired sandboxes are looked for (default 250 ms).
	ReapInterval time.Duration
	// ProxyDomain turns on the sandbox port proxy: requests whose Host is
	// <port>-<sandbox id>.<ProxyDomain> go to that port in the sandbox. Empty: no proxy.
	ProxyDomain string
	// PrivatePorts is the default of a create without public_ports: true, its ports need the
	// sandbox's traffic token; false, anyone who knows the id reaches them.
	PrivatePorts bool
	// EgressOpen are private ranges the operator opens for every sandbox's egress (--egress-open,
	// validated with network.ParseOpen); teams may then allow inside them. Shown by GET /v1/info.
	EgressOpen []netip.Prefix
	// BlobStore is the blob store's URL (without credentials) that registering hosts are told,
	// or "" when artifacts stay on their host. Blob is that store, opened: the databases'
	// archived WAL and base backups go there (nil: not archived).
	BlobStore string
	Blob      blob.Store
	// AuditRetention is how long audit entries are kept (default 30 days); AuditPruneInterval
	// how often older ones are deleted (default 1 h).
	AuditRetention     time.Duration
	AuditPruneInterval time.Duration
	// KilledRetention is how long a killed sandbox's record is kept after its last change (default
	// 7 days; then GET answers 404 as for an unknown id); KilledPruneInterval how often older ones
	// are deleted (default 1 h).
	KilledRetention     time.Duration
	KilledPruneInterval time.Duration
	// RateLimit is the per-key rate limits (zero: none).
	RateLimit RateLimit
	// Quota is every team's default limits (zero: none); an admin key may override them per team.
	Quota Quota
	// Console serves every GET of a path outside the API (/v1, /internal, /healthz, /metrics): the
	// web console (package web). Nil: those answer the JSON 404 too.
	Console http.Handler
	// SecretsKey (32 bytes) seals functions' secrets and databases' passwords at rest
	// (AES-256-GCM); empty: unsealed.
	SecretsKey []byte
	// DBRouterPort is the SNI router's public port in databases' connection strings (default
	// 5432); PublicURL the server's base URL for their http_url (empty: none).
	DBRouterPort int
	PublicURL    string
	// GuestCA is PEM of extra CA certificates every sandbox trusts (app builds and instances
	// too); empty: none.
	GuestCA []byte
	// Webhooks is which destinations webhooks may reach (internal/webhooks): `pandastack up`
	// allows loopback; the zero value refuses every non-public address.
	Webhooks webhooks.Policy
	// WebhookRetryBase is the first retry's delay of a failed delivery (default 5 s, doubling).
	WebhookRetryBase time.Duration
	// GitDir holds apps' git remotes (bare repositories, served at /git/<app>.git); empty: none.
	GitDir string
	// Version is reported by /healthz.
	Version string
	Now     func() time.Time
}

// Server serves the API. Create with New.
type Server struct {
	cfg   Config
	store *store.Store
	sched *scheduler.Scheduler
	svc   *sandboxes.Service
	tmpl  *templates.Service
	// schedules is the cron engine (internal/schedules); RunSchedules ticks it.
	schedules *schedules.Engine
	// functions is internal/functions' service.
	functions *functions.Service
	// databases is internal/database's service; apps is internal/apps'.
	databases *database.Service
	apps      *apps.Service
	webhooks  *webhooks.Service
	log       *slog.Logger
	auth      *auth.Authenticator
	metrics   *metrics
	limits    struct{ all, create *buckets } // nil: no rate limit
	tickets   terminalTickets
	streams   inflight.Counter // open GET /v1/events streams by key
	handler   http.Handler
	// mcpHandler serves /mcp (internal/mcptools) over the API's routes.
	mcpHandler http.Handler
	reaper     reaper
	pruneLock  *store.Lock // one replica prunes killed sandboxes' records at a time
}

// New builds a server from cfg.
func New(cfg Config) *Server {
	defaults.Positive(&cfg.DefaultTTL, DefaultTTL)
	defaults.Positive(&cfg.MaxTTL, DefaultMaxTTL)
	if cfg.DefaultTTL > cfg.MaxTTL {
		cfg.DefaultTTL = cfg.MaxTTL
	}
	defaults.Positive(&cfg.MaxUploadBytes, DefaultMaxUploadBytes)
	defaults.Positive(&cfg.ReapInterval, DefaultReapInterval)
	defaults.Positive(&cfg.AuditRetention, DefaultAuditRetention)
	defaults.Positive(&cfg.AuditPruneInterval, DefaultAuditPruneInterval)
	defaults.Positive(&cfg.KilledRetention, DefaultKilledRetention)
	defaults.Positive(&cfg.KilledPruneInterval, DefaultKilledPruneInterval)
	cfg.Logger = cmp.Or(cfg.Logger, slog.Default())
	scheduleClock := cfg.Now // nil: the engine reads the database's clock
	defaults.Clock(&cfg.Now)
	cfg.Version = cmp.Or(cfg.Version, "dev")
	s := &Server{cfg: cfg, store: cfg.Store, sched: cfg.Scheduler, log: cfg.Logger,
		auth: &auth.Authenticator{Store: cfg.Store, Now: cfg.Now}, metrics: newMetrics(), pruneLock: cfg.Store.NewLock("killed-prune")}
	s.svc = sandboxes.New(sandboxes.Config{Store: cfg.Store, Scheduler: cfg.Scheduler, Logger: cfg.Logger, Now: cfg.Now,
		DefaultTTL: cfg.DefaultTTL, MaxTTL: cfg.MaxTTL, EgressOpen: cfg.EgressOpen, GuestCA: cfg.GuestCA, Blob: cfg.Blob})
	s.tmpl = templates.New(cfg.Store, cfg.Scheduler, cfg.Logger)
	deps := sandboxes.ProductDeps{Store: cfg.Store, Sandboxes: s.svc, Templates: s.tmpl, Logger: cfg.Logger}
	s.schedules = schedules.New(schedules.Config{ProductDeps: deps, Now: scheduleClock})
	s.functions = functions.New(functions.Config{ProductDeps: deps,
		SecretsKey: cfg.SecretsKey, ProxyDomain: cfg.ProxyDomain})
	s.schedules.SetFunctions(s.functions)
	s.databases = database.New(database.Config{ProductDeps: deps,
		SecretsKey: cfg.SecretsKey, Domain: cfg.ProxyDomain, RouterPort: cfg.DBRouterPort, HTTPBase: cfg.PublicURL, Blob: cfg.Blob})
	s.apps = apps.New(apps.Config{ProductDeps: deps,
		SecretsKey: cfg.SecretsKey, ProxyDomain: cfg.ProxyDomain, GitDir: cfg.GitDir})
	s.webhooks = webhooks.New(webhooks.Config{Store: cfg.Store, SecretsKey: cfg.SecretsKey, Policy: cfg.Webhooks, View: viewOf,
		TemplateView: builtTemplateView, DeploymentView: s.webhookDeploymentView,
		Logger: cfg.Logger, Now: cfg.Now, RetryBase: cfg.WebhookRetryBase})
	s.limits.all = newBuckets(cfg.RateLimit.PerSecond, cfg.RateLimit.Burst, cfg.Now)
	s.limits.create = newBuckets(cfg.RateLimit.CreatesPerSecond, cfg.RateLimit.CreateBurst, cfg.Now)
	s.handler = s.routes()
	return s
}

// Handler is the server's HTTP handler.
func (s *Server) Handler() http.Handler { return s.handler }

func (s *Server) now() time.Time { return s.cfg.Now().UTC() }

// access says what a route asks of its caller.
type access int

const (
	open    access = iota // nothing: health, metrics, the API's own description
	cluster               // the cluster token: host agents registering and heartbeating
	apiKey                // an API key; the handler acts for the key's team
)

// route is one entry of the route table, the one list the mux is built from (and that the
// OpenAPI test holds docs/openapi.yaml to).
type route struct {
	method, path string
	access       access
	handler      http.HandlerFunc
}

// routeTable is every route the server answers, besides the port proxy (chosen by Host, not by
// path) and the JSON 404 of every miss.
func (s *Server) routeTable() []route {
	return []route{
		{"GET", "/healthz", open, s.healthz},
		{"GET", "/metrics", open, s.metricsHandler},
		{"GET", "/v1/openapi.json", open, s.openAPI},

		{"POST", scheduler.RegisterPath, cluster, s.registerHost},
		{"POST", scheduler.HeartbeatPath, cluster, s.heartbeatHost},

		{"GET", "/v1/info", apiKey, s.info},
		{"POST", "/v1/sandboxes", apiKey, s.createSandbox},
		{"GET", "/v1/sandboxes", apiKey, s.listSandboxes},
		{"GET", "/v1/sandboxes/{id}", apiKey, s.getSandbox},
		{"DELETE", "/v1/sandboxes/{id}", apiKey, s.killSandbox},
		{"POST", "/v1/sandboxes/{id}/ttl", apiKey, s.setTTL},
		{"GET", "/v1/sandboxes/{id}/metrics", apiKey, s.sandboxMetrics},
		{"POST", "/v1/sandboxes/{id}/exec", apiKey, s.exec},
		{"POST", "/v1/sandboxes/{id}/code", apiKey, s.runCode},
		{"POST", "/v1/sandboxes/{id}/code/contexts", apiKey, s.createCodeContext},
		{"GET", "/v1/sandboxes/{id}/code/contexts", apiKey, s.listCodeContexts},
		{"DELETE", "/v1/sandboxes/{id}/code/contexts/{context}", apiKey, s.deleteCodeContext},
		{"POST", "/v1/sandboxes/{id}/code/interrupt", apiKey, s.interruptCode},
		{"GET", "/v1/sandboxes/{id}/files", apiKey, s.readFile},
		{"PUT", "/v1/sandboxes/{id}/files", apiKey, s.writeFile},
		{"DELETE", "/v1/sandboxes/{id}/files", apiKey, s.removeFile},
		{"GET", "/v1/sandboxes/{id}/files/list", apiKey, s.listFiles},
		{"GET", "/v1/sandboxes/{id}/files/stat", apiKey, s.statFile},
		{"POST", "/v1/sandboxes/{id}/files/mkdir", apiKey, s.mkdir},
		{"POST", "/v1/sandboxes/{id}/files/move", apiKey, s.move},
		{"GET", "/v1/sandboxes/{id}/files/watch", apiKey, s.watchFiles},
		{"GET", "/v1/sandboxes/{id}/files/archive", apiKey, s.getArchive},
		{"PUT", "/v1/sandboxes/{id}/files/archive", apiKey, s.putArchive},
		{"POST", "/v1/sandboxes/{id}/processes", apiKey, s.startProcess},
		{"GET", "/v1/sandboxes/{id}/processes", apiKey, s.listProcesses},
		{"GET", "/v1/sandboxes/{id}/processes/{pid}/output", apiKey, s.processOutput},
		{"POST", "/v1/sandboxes/{id}/processes/{pid}/stdin", apiKey, s.processStdin},
		{"POST", "/v1/sandboxes/{id}/processes/{pid}/signal", apiKey, s.signalProcess},
		{"POST", "/v1/sandboxes/{id}/processes/{pid}/resize", apiKey, s.resizeProcess},
		{"DELETE", "/v1/sandboxes/{id}/processes/{pid}", apiKey, s.killProcess},
		{"GET", auth.TerminalRoute, apiKey, s.pty},
		{"POST", auth.TerminalRoute + "/ticket", apiKey, s.terminalTicket},
		{"GET", "/v1/events", apiKey, s.events},
		{"POST", "/v1/sandboxes/{id}/fork", apiKey, s.fork},
		{"POST", "/v1/sandboxes/{id}/snapshots", apiKey, s.createSnapshot},
		{"POST", "/v1/sandboxes/{id}/hibernate", apiKey, s.hibernate},
		{"POST", "/v1/sandboxes/{id}/wake", apiKey, s.wake},
		{"GET", "/v1/snapshots", apiKey, s.listSnapshots},
		{"GET", "/v1/snapshots/{id}", apiKey, s.getSnapshot},
		{"DELETE", "/v1/snapshots/{id}", apiKey, s.deleteSnapshot},
		{"POST", "/v1/volumes", apiKey, s.createVolume},
		{"GET", "/v1/volumes", apiKey, s.listVolumes},
		{"GET", "/v1/volumes/{id}", apiKey, s.getVolume},
		{"POST", "/v1/volumes/{id}/resize", apiKey, s.resizeVolume},
		{"DELETE", "/v1/volumes/{id}", apiKey, s.deleteVolume},
		{"POST", "/v1/templates", apiKey, s.buildTemplate},
		{"DELETE", "/v1/templates/{name}", apiKey, s.deleteTemplate},
		{"GET", "/v1/templates", apiKey, s.listTemplates},
		{"GET", "/v1/templates/{name}", apiKey, s.getTemplate},
		{"POST", "/v1/keys", apiKey, s.createKey},
		{"GET", "/v1/keys", apiKey, s.listKeys},
		{"DELETE", "/v1/keys/{id}", apiKey, s.revokeKey},
		{"POST", "/v1/teams", apiKey, s.createTeam},
		{"GET", "/v1/audit", apiKey, s.listAudit},
		{"GET", "/v1/usage", apiKey, s.usage},
		{"PUT", "/v1/teams/{id}/quota", apiKey, s.setQuota},
		{"GET", "/v1/hosts", apiKey, s.listHosts},
		{"POST", "/v1/hosts/{id}/drain", apiKey, s.drainHost},
		{"DELETE", "/v1/hosts/{id}/drain", apiKey, s.undrainHost},
		{"GET", "/v1/hosts/{id}/doctor", apiKey, s.hostDoctor},
		{"POST", "/v1/hosts/{id}/doctor/repair", apiKey, s.hostDoctor},
		{"POST", "/v1/functions", apiKey, s.deployFunction},
		{"GET", "/v1/functions", apiKey, s.listFunctions},
		{"GET", "/v1/functions/{id}", apiKey, s.getFunction},
		{"DELETE", "/v1/functions/{id}", apiKey, deleteByID(s, s.functions.Delete)},
		{"GET", "/v1/functions/{id}/versions", apiKey, byID(s, http.StatusOK, s.functions.Versions, func(vs []store.FunctionVersion) v1.FunctionVersions {
			return v1.FunctionVersions{Versions: viewsOf(vs, functionVersionView)}
		})},
		{"POST", "/v1/functions/{id}/invoke", apiKey, s.invokeFunction},
		{"GET", "/v1/functions/{id}/runs", apiKey, pageByID(s, s.functions.Runs, func(runs []store.FunctionRun) v1.FunctionRuns {
			return v1.FunctionRuns{Runs: viewsOf(runs, functionRunView)}
		})},
		{"GET", "/v1/functions/{id}/runs/{run}", apiKey, s.getFunctionRun},
		{"POST", "/v1/schedules", apiKey, s.createSchedule},
		{"GET", "/v1/schedules", apiKey, s.listSchedules},
		{"GET", "/v1/schedules/{id}", apiKey, byID(s, http.StatusOK, s.schedules.Get, s.scheduleView)},
		{"DELETE", "/v1/schedules/{id}", apiKey, deleteByID(s, s.schedules.Delete)},
		{"POST", "/v1/schedules/{id}/pause", apiKey, s.pauseSchedule},
		{"POST", "/v1/schedules/{id}/resume", apiKey, s.resumeSchedule},
		{"POST", "/v1/schedules/{id}/trigger", apiKey, byID(s, http.StatusAccepted, s.schedules.Trigger, scheduleRunView)},
		{"GET", "/v1/schedules/{id}/runs", apiKey, pageByID(s, s.schedules.Runs, func(runs []store.ScheduleRun) v1.ScheduleRuns {
			return v1.ScheduleRuns{Runs: viewsOf(runs, scheduleRunView)}
		})},
		{"POST", "/v1/databases", apiKey, s.createDatabase},
		{"GET", "/v1/databases", apiKey, s.listDatabases},
		{"GET", "/v1/databases/{id}", apiKey, s.getDatabase},
		{"DELETE", "/v1/databases/{id}", apiKey, deleteByID(s, s.databases.Delete)},
		{"POST", "/v1/databases/{id}/query", apiKey, s.queryDatabase},
		{"POST", "/v1/databases/{id}/branches", apiKey, s.branchDatabase},
		{"POST", "/v1/databases/{id}/password", apiKey, s.rotateDatabasePassword},
		{"GET", "/v1/databases/{id}/stats", apiKey, byID(s, http.StatusOK, s.databases.Stats, asIs[v1.DatabaseStats])},
		{"GET", "/v1/databases/{id}/logs", apiKey, s.databaseLogs},
		{"POST", "/v1/databases/{id}/backups", apiKey, s.backupDatabase},
		{"GET", "/v1/databases/{id}/backups", apiKey, s.listDatabaseBackups},
		{"POST", "/v1/databases/{id}/restore", apiKey, s.restoreDatabase},
		{"POST", "/v1/apps", apiKey, s.createApp},
		{"GET", "/v1/apps", apiKey, s.listApps},
		{"GET", "/v1/apps/{id}", apiKey, byID(s, http.StatusOK, s.apps.Get, s.appView)},
		{"PATCH", "/v1/apps/{id}", apiKey, s.updateApp},
		{"DELETE", "/v1/apps/{id}", apiKey, deleteByID(s, s.apps.Delete)},
		{"POST", "/v1/apps/{id}/deployments", apiKey, s.deployApp},
		{"GET", "/v1/apps/{id}/deployments", apiKey, s.listDeployments},
		{"GET", "/v1/apps/{id}/deployments/{dep}", apiKey, s.getDeployment},
		{"GET", "/v1/apps/{id}/deployments/{dep}/logs", apiKey, s.deploymentLogs},
		{"POST", "/v1/apps/{id}/rollback", apiKey, s.rollbackApp},
		{"GET", "/v1/apps/{id}/previews", apiKey, s.listPreviews},
		{"DELETE", "/v1/apps/{id}/previews/{branch}", apiKey, s.deletePreview},
		{"GET", "/v1/apps/{id}/logs", apiKey, s.appLogs},
		{"POST", "/v1/apps/{id}/github", apiKey, s.connectGitHub},
		{"POST", "/v1/apps/{id}/github/webhook", open, s.githubWebhook},

		{"POST", "/v1/webhooks", apiKey, s.createWebhook},
		{"GET", "/v1/webhooks", apiKey, s.listWebhooks},
		{"GET", "/v1/webhooks/{id}", apiKey, byID(s, http.StatusOK, s.webhooks.Get, asIs[v1.Webhook])},
		{"DELETE", "/v1/webhooks/{id}", apiKey, deleteByID(s, s.webhooks.Delete)},
		{"GET", "/v1/webhooks/{id}/deliveries", apiKey, pageByID(s, s.webhooks.Deliveries, func(list []v1.WebhookDelivery) v1.WebhookDeliveries {
			return v1.WebhookDeliveries{Deliveries: list}
		})},

		{"POST", auth.MCPRoute, apiKey, s.mcp},
		{"GET", auth.MCPRoute, apiKey, s.mcp},
		{"DELETE", auth.MCPRoute, apiKey, s.mcp},
	}
}

func (s *Server) routes() http.Handler {
	mux := http.NewServeMux()
	for _, rt := range s.routeTable() {
		var h http.Handler = rt.handler
		switch rt.access {
		case cluster:
			h = s.cluster(rt.handler)
		case apiKey:
			inner := s.rateLimited(rt, s.audited(rt, s.scoped(rt, rt.handler)))
			h = s.auth.Middleware(inner, s.writeError)
			if rt.path == auth.TerminalRoute {
				h = s.ticketed(h, inner)
			}
		}
		mux.Handle(rt.method+" "+rt.path, h)
	}
	// Apps' git remotes (git's smart HTTP protocol, its own Basic auth): not part of the /v1 API.
	mux.HandleFunc("GET /git/{repo}/{rest...}", s.gitRemote)
	mux.HandleFunc("POST /git/{repo}/{rest...}", s.gitRemote)
	// A catch-all keeps every miss (unknown path or method) in the JSON error shape; GETs of
	// other paths are the console's (its pages, its files, index.html for the rest).
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		if s.cfg.Console != nil && (r.Method == http.MethodGet || r.Method == http.MethodHead) && !apiPath(r.URL.Path) {
			s.cfg.Console.ServeHTTP(w, r)
			return
		}
		s.writeError(w, r, notFound("no API route for %s %s", r.Method, r.URL.Path))
	})
	// /mcp's tools call the API in-process, without the port proxy's Host routing.
	s.mcpHandler = mcptools.Handler(s.cfg.Version, s.outer(mux))
	return s.outer(s.ports(mux))
}

// mcp is /mcp: the MCP server over streamable HTTP (internal/mcptools, docs/mcp.md), already
// authenticated and rate limited as a /v1 route; its tools' calls are /v1 calls of their own.
func (s *Server) mcp(w http.ResponseWriter, r *http.Request) {
	r.Header.Set(mcptools.RemoteHeader, r.RemoteAddr)
	s.mcpHandler.ServeHTTP(w, r)
}

// apiPath reports whether p belongs to the API (never the console's).
func apiPath(p string) bool {
	for _, pre := range []string{"/v1/", "/internal/"} {
		if strings.HasPrefix(p, pre) {
			return true
		}
	}
	return p == "/v1" || p == "/internal" || p == auth.MCPRoute || p == "/healthz" || p == "/metrics"
}

// ports sends requests for <port>-<id>.<domain> to the sandbox proxy, those for
// <function id>.fn.<domain> to the function's HTTP trigger, those for <database id>.db.<domain>
// (and /sql with a Neon-Connection-String on any host) to the /sql query broker, those for
// <app>.apps.<domain> to the app's live instance, everything else to the API.
func (s *Server) ports(api http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if s.cfg.ProxyDomain != "" && (s.databases.IsHost(r.Host) || r.URL.Path == "/sql" && r.Header.Get("Neon-Connection-String") != "") {
			s.databaseSQL(w, r)
			return
		}
		if name, ok := s.appHost(r.Host); ok {
			s.serveApp(w, r, name)
			return
		}
		if id, ok := s.functionHost(r.Host); ok {
			s.httpTrigger(w, r, id)
			return
		}
		if port, id, ok := s.portTarget(r.Host); ok {
			s.proxy(w, r, port, id)
			return
		}
		api.ServeHTTP(w, r)
	})
}

var requestIDPattern = regexp.MustCompile(`^[A-Za-z0-9._-]{1,64}$`)

// recorder remembers the status for metrics and logs; Unwrap keeps http.ResponseController
// (Flush for streams) working through it.
type recorder struct {
	http.ResponseWriter
	status int
}

func (r *recorder) WriteHeader(code int) {
	if r.status == 0 {
		r.status = code
	}
	r.ResponseWriter.WriteHeader(code)
}

func (r *recorder) Write(b []byte) (int, error) {
	if r.status == 0 {
		r.status = http.StatusOK
	}
	return r.ResponseWriter.Write(b)
}

func (r *recorder) Unwrap() http.ResponseWriter { return r.ResponseWriter }

// outer gives every answer an X-Request-Id, turns panics into a 500 that names the request id
// (the stack goes to the log only), counts statuses and logs the request.
func (s *Server) outer(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		rid := r.Header.Get("X-Request-Id")
		if !requestIDPattern.MatchString(rid) {
			rid = auth.NewID("req_")
		}
		w.Header().Set("X-Request-Id", rid)
		rec := &recorder{ResponseWriter: w}
		defer func() {
			if p := recover(); p != nil {
				if p == http.ErrAbortHandler {
					panic(p)
				}
				s.log.Error("panic serving request", "request_id", rid, "method", r.Method, "path", r.URL.Path,
					"panic", p, "stack", string(debug.Stack()))
				if rec.status == 0 {
					writeJSON(rec, http.StatusInternalServerError, errorBody(errdefs.Internal.Code(), "internal error (request id "+rid+")"))
				}
			}
			status := rec.status
			if status == 0 {
				status = http.StatusOK
			}
			s.metrics.request(status)
			lvl := slog.LevelDebug
			switch {
			case status >= 500:
				lvl = slog.LevelWarn
			case status >= 400:
				lvl = slog.LevelInfo
			}
			s.log.Log(r.Context(), lvl, "request", "request_id", rid, "method", r.Method, "path", r.URL.Path,
				"status", status, "ms", time.Since(start).Milliseconds())
		}()
		next.ServeHTTP(rec, r)
	})
}

func (s *Server) healthz(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), 3*time.Second)
	defer cancel()
	if err := s.store.Ping(ctx); err != nil {
		s.log.Error("health: store not answering", "err", err)
		writeJSON(w, http.StatusServiceUnavailable, map[string]any{"ok": false, "version": s.cfg.Version,
			"error": map[string]string{"code": "internal", "message": "the database is not answering"}})
		return
	}
	hosts, _ := s.store.CountHostsByState(ctx)
	writeJSON(w, http.StatusOK, map[string]any{"ok": true, "version": s.cfg.Version, "store": string(s.store.Dialect()),
		"hosts_up": hosts[store.HostUp]})
}

func (s *Server) metricsHandler(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
	if err := s.metrics.write(r.Context(), w, s.store, s.cfg.Now(), s.sched.OrphansKilled(), s.sched.Refusals()); err != nil {
		s.writeError(w, r, err)
	}
}

// cluster guards the internal host API with the cluster token.
func (s *Server) cluster(h http.HandlerFunc) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if s.cfg.ClusterToken == "" {
			s.writeError(w, r, notFound("the internal host API is disabled: start the server with --cluster-token"))
			return
		}
		tok, _ := auth.BearerToken(r)
		if subtle.ConstantTimeCompare([]byte(tok), []byte(s.cfg.ClusterToken)) != 1 {
			s.writeError(w, r, errdefs.New(errdefs.Unauthorized, "wrong or missing cluster token"))
			return
		}
		h(w, r)
	})
}

func (s *Server) registerHost(w http.ResponseWriter, r *http.Request) {
	var reg scheduler.Registration
	if err := decodeLenient(w, r, &reg); err != nil {
		s.writeError(w, r, err)
		return
	}
	if reg.HostID == "" || reg.URL == "" {
		s.writeError(w, r, invalid("host_id and url are required"))
		return
	}
	if err := s.sched.Register(r.Context(), reg); err != nil {
		s.writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, scheduler.Registered{HostID: reg.HostID, HeartbeatTimeoutSeconds: s.sched.HeartbeatTimeout().Seconds(),
		BlobStore: s.cfg.BlobStore})
}

func (s *Server) heartbeatHost(w http.ResponseWriter, r *http.Request) {
	var reg scheduler.Registration
	if err := decodeLenient(w, r, &reg); err != nil {
		s.writeError(w, r, err)
		return
	}
	err := s.sched.Heartbeat(r.Context(), reg)
	if err == scheduler.ErrUnknownHost {
		s.writeError(w, r, notFound("host %q is not registered: register first", reg.HostID))
		return
	}
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"host_id": reg.HostID})
}

// RunVolumeSweeper deletes, every minute, the sandbox-owned volumes (copies of an ephemeral
// template data volume) whose sandboxes ended without a kill that deleted them; one replica at a
// time.
func (s *Server) RunVolumeSweeper(ctx context.Context) {
	s.svc.RunVolumeSweeper(ctx, s.store.NewLock("sandbox-volumes"), time.Minute)
}

// RunPublishedSweeper deletes from bs, hourly, the snapshots' and hibernations' publications
// nothing needs any more, and then their unreferenced chunks (sandboxes.SweepPublished).
func (s *Server) RunPublishedSweeper(ctx context.Context, bs blob.Store) {
	s.svc.RunPublishedSweeper(ctx, bs, time.Hour, time.Hour)
}

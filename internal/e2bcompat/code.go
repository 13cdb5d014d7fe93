package e2bcompat

import (
	"context"
	"encoding/json"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/pandastack/pandastack/internal/codeinterp"
	"github.com/pandastack/pandastack/internal/errdefs"
	v1 "github.com/pandastack/pandastack/internal/wire/v1"
)

// The code interpreter's port (49999) over internal/codeinterp's kernels: /execute answers
// E2B's NDJSON lines, /contexts E2B's context objects.

// codeKeepalive is how often a silent execution sends a keepalive line (E2B's server: 5 s).
const codeKeepalive = 5 * time.Second

func (s *Server) codeRoutes() *http.ServeMux {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /health", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
	})
	mux.HandleFunc("POST /execute", s.execute)
	mux.HandleFunc("POST /contexts", s.createContext)
	mux.HandleFunc("GET /contexts", s.listContexts)
	mux.HandleFunc("DELETE /contexts/{id}", s.deleteContext)
	mux.HandleFunc("POST /contexts/{id}/restart", s.restartContext)
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeError(w, errdefs.NotFoundf("code interpreter: no route %s %s", r.Method, truncate(r.URL.Path)))
	})
	return mux
}

// languageOf is an E2B language name as internal/codeinterp takes it ("" the default, Python),
// and the error when the kernels do not run that language: the check is codeinterp's, so the
// facade serves whatever languages its contexts gain.
func languageOf(l *string) (string, error) {
	if l == nil {
		return "", nil
	}
	lang := strings.ToLower(strings.TrimSpace(*l))
	if err := codeinterp.CheckContext(&v1.CreateCodeContextRequest{Language: lang}); err != nil {
		return "", err
	}
	return lang, nil
}

// unsupportedLanguage is the name of the execution error a runCode in a language the kernels
// do not run answers: the SDK shows it as the execution's error (a 4xx would reach the caller as
// a bare "400 Bad Request").
const unsupportedLanguage = "UnsupportedLanguageError"

// line is one NDJSON line of /execute.
type line map[string]any

// resultLine is E2B's result line of one of our results.
func resultLine(r *v1.CodeResult) line {
	l := line{"type": "result", "is_main_result": r.IsMainResult}
	for k, v := range map[string]string{"text": r.Text, "html": r.HTML, "markdown": r.Markdown, "png": r.PNG, "jpeg": r.JPEG,
		"svg": r.SVG, "latex": r.LaTeX, "javascript": r.JavaScript} {
		if v != "" {
			l[k] = v
		}
	}
	if r.JSON != "" && json.Valid([]byte(r.JSON)) {
		l["json"] = json.RawMessage(r.JSON)
	}
	return l
}

func (s *Server) execute(w http.ResponseWriter, r *http.Request) {
	t := targetOf(r.Context())
	var req struct {
		Code      string            `json:"code"`
		ContextID *string           `json:"context_id"`
		Language  *string           `json:"language"`
		EnvVars   map[string]string `json:"env_vars"`
	}
	err := decode(w, r, &req)
	if err == nil {
		err = s.b.CheckEnv("env_vars", req.EnvVars)
	}
	creq := v1.CodeRequest{Code: req.Code}
	if req.ContextID != nil {
		creq.ContextID = *req.ContextID
	}
	if err == nil && creq.ContextID == "" { // a context runs its own language
		var langErr error
		if creq.Language, langErr = languageOf(req.Language); langErr != nil {
			_, msg := answerOf(langErr)
			w.Header().Set("Content-Type", "application/x-ndjson")
			b, _ := json.Marshal(line{"type": "error", "name": unsupportedLanguage, "value": msg, "traceback": unsupportedLanguage + ": " + msg})
			w.Write(append(b, '\n'))
			return
		}
	}
	if err == nil {
		err = codeinterp.CheckRun(&creq)
	}
	if err == nil && creq.ContextID != "" {
		creq.ContextID, err = s.contextID(r.Context(), t, creq.ContextID)
	}
	if err != nil {
		s.fail(w, r, err)
		return
	}
	// Headers go out with the first line, so a missing context still gets its status (404).
	var mu sync.Mutex
	started := false
	rc := http.NewResponseController(w)
	emit := func(l line) error {
		mu.Lock()
		defer mu.Unlock()
		if !started {
			started = true
			w.Header().Set("Content-Type", "application/x-ndjson")
			w.WriteHeader(http.StatusOK)
		}
		b, _ := json.Marshal(l)
		if _, err := w.Write(append(b, '\n')); err != nil {
			return err
		}
		return rc.Flush()
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		tick := time.NewTicker(codeKeepalive)
		defer tick.Stop()
		for {
			select {
			case <-stop:
				return
			case <-tick.C:
				mu.Lock()
				running := started
				mu.Unlock()
				if running {
					emit(line{"type": "keepalive"})
				}
			}
		}
	}()
	stamp := func() string { return time.Now().UTC().Format("2006-01-02T15:04:05.000000Z") }
	restore, err := withEnv(r.Context(), t, creq, req.EnvVars)
	if err != nil {
		close(stop)
		wg.Wait()
		s.fail(w, r, err)
		return
	}
	defer restore()
	err = codeinterp.Run(r.Context(), t.c, t.sb.ID, creq, func(ev v1.CodeEvent) error {
		switch {
		case ev.Stdout != nil:
			return emit(line{"type": "stdout", "text": *ev.Stdout, "timestamp": stamp()})
		case ev.Stderr != nil:
			return emit(line{"type": "stderr", "text": *ev.Stderr, "timestamp": stamp()})
		case ev.Result != nil:
			return emit(resultLine(ev.Result))
		case ev.Error != nil:
			return emit(line{"type": "error", "name": ev.Error.Name, "value": ev.Error.Value, "traceback": ev.Error.Traceback})
		case ev.End != nil:
			if ev.End.ExecutionCount != nil {
				if err := emit(line{"type": "number_of_executions", "execution_count": *ev.End.ExecutionCount}); err != nil {
					return err
				}
			}
			return emit(line{"type": "end_of_execution"})
		}
		return nil
	})
	close(stop)
	wg.Wait()
	switch {
	case err == nil || r.Context().Err() != nil:
	case !started:
		s.fail(w, r, err)
	default:
		_, msg := answerOf(err)
		emit(line{"type": "error", "name": "SandboxError", "value": msg, "traceback": ""})
	}
}

// contextJSON is E2B's context object.
type contextJSON struct {
	ID       string `json:"id"`
	Language string `json:"language"`
	Cwd      string `json:"cwd"`
}

func contextOf(c v1.CodeContext) contextJSON {
	lang := c.Language
	if lang == "" {
		lang = "python"
	}
	return contextJSON{ID: c.ID, Language: lang, Cwd: c.Cwd}
}

func (s *Server) createContext(w http.ResponseWriter, r *http.Request) {
	t := targetOf(r.Context())
	var req struct {
		Language *string `json:"language"`
		Cwd      string  `json:"cwd"`
	}
	err := decode(w, r, &req)
	creq := v1.CreateCodeContextRequest{Cwd: req.Cwd}
	if err == nil {
		creq.Language, err = languageOf(req.Language)
	}
	if err == nil {
		err = codeinterp.CheckContext(&creq)
	}
	var cc v1.CodeContext
	if err == nil {
		cc, err = codeinterp.CreateContext(r.Context(), t.c, t.sb.ID, creq)
	}
	s.reply(w, r, http.StatusOK, contextOf(cc), err)
}

func (s *Server) listContexts(w http.ResponseWriter, r *http.Request) {
	t := targetOf(r.Context())
	list, err := codeinterp.ListContexts(r.Context(), t.c, t.sb.ID)
	var standIns map[string]string
	if err == nil {
		standIns, err = s.b.Store.E2BCodeContexts(r.Context(), t.sb.ID)
	}
	shown := map[string]string{} // a restarted context's id → the id the SDK knows
	for e2bID, id := range standIns {
		shown[id] = e2bID
	}
	out := make([]contextJSON, 0, len(list))
	for _, c := range list {
		if e2bID, ok := shown[c.ID]; ok {
			c.ID = e2bID
		}
		out = append(out, contextOf(c))
	}
	s.reply(w, r, http.StatusOK, out, err)
}

// contextID is the context that stands for the context id the SDK knows: itself, or the fresh
// context a restart made for it.
func (s *Server) contextID(ctx context.Context, t target, e2bID string) (string, error) {
	standIns, err := s.b.Store.E2BCodeContexts(ctx, t.sb.ID)
	if id, ok := standIns[e2bID]; ok {
		return id, err
	}
	return e2bID, err
}

// contextCall answers a call on the context the path names (e2bID, as the SDK knows it; id, the
// context standing for it): call's error, else 200 {}.
func (s *Server) contextCall(w http.ResponseWriter, r *http.Request, call func(ctx context.Context, t target, e2bID, id string) error) {
	e2bID := r.PathValue("id")
	t := targetOf(r.Context())
	err := codeinterp.CheckContextID(e2bID)
	var id string
	if err == nil {
		id, err = s.contextID(r.Context(), t, e2bID)
	}
	if err == nil {
		err = call(r.Context(), t, e2bID, id)
	}
	s.reply(w, r, http.StatusOK, map[string]any{}, err)
}

func (s *Server) deleteContext(w http.ResponseWriter, r *http.Request) {
	s.contextCall(w, r, func(ctx context.Context, t target, e2bID, id string) error {
		if err := codeinterp.DeleteContext(ctx, t.c, t.sb.ID, id); err != nil {
			return err
		}
		return s.b.Store.SetE2BCodeContext(ctx, t.sb.ID, e2bID, "")
	})
}

// defaultContext is the code server's default context: it cannot be replaced.
const defaultContext = "default"

// restartContext restarts a context as a kernel restart does: a fresh context (new kernel, same
// cwd and language) takes the place of the old one under the id the SDK keeps, and the old one
// is stopped. The default context cannot be replaced: what runs in it is interrupted and its
// variables are cleared (IPython's %reset -f), modules it imported stay loaded.
func (s *Server) restartContext(w http.ResponseWriter, r *http.Request) {
	s.contextCall(w, r, func(ctx context.Context, t target, e2bID, id string) error {
		if id == defaultContext {
			if err := codeinterp.Interrupt(ctx, t.c, t.sb.ID, id); err != nil {
				return err
			}
			timeout := float64(60)
			return quietly(ctx, t, v1.CodeRequest{Code: "%reset -f", ContextID: id, TimeoutSeconds: &timeout}, "restarting the context")
		}
		list, err := codeinterp.ListContexts(ctx, t.c, t.sb.ID)
		if err != nil {
			return err
		}
		i := slices.IndexFunc(list, func(c v1.CodeContext) bool { return c.ID == id })
		if i < 0 {
			return errdefs.NotFoundf("context %s not found", truncate(e2bID))
		}
		fresh, err := codeinterp.CreateContext(ctx, t.c, t.sb.ID, v1.CreateCodeContextRequest{Cwd: list[i].Cwd, Language: list[i].Language})
		if err != nil {
			return err
		}
		if err := s.b.Store.SetE2BCodeContext(ctx, t.sb.ID, e2bID, fresh.ID); err != nil {
			codeinterp.DeleteContext(context.WithoutCancel(ctx), t.c, t.sb.ID, fresh.ID)
			return err
		}
		// The old kernel goes; the SDK's id already names the fresh one.
		if err := codeinterp.DeleteContext(context.WithoutCancel(ctx), t.c, t.sb.ID, id); err != nil {
			s.log.Warn("e2b: a restarted code context's old kernel did not stop", "sandbox", t.sb.ID, "context", id, "err", err)
		}
		return nil
	})
}

// quietly runs req for its effect; an exception in it is an error (what failed).
func quietly(ctx context.Context, t target, req v1.CodeRequest, what string) error {
	x, err := codeinterp.Collect(ctx, t.c, t.sb.ID, req)
	if err == nil && x.Error != nil {
		err = errdefs.New(errdefs.Unavailable, "%s failed: %s: %s", what, x.Error.Name, x.Error.Value)
	}
	return err
}

// withEnv sets env in the execution's context for the length of one execution, as E2B's
// env_vars do: the kernel's os.environ gets them before the code runs and its earlier values
// back after (restore). The kernels have no per-execution environment, so these are two short
// executions of their own around the code's.
func withEnv(ctx context.Context, t target, req v1.CodeRequest, env map[string]string) (restore func(), err error) {
	if len(env) == 0 {
		return func() {}, nil
	}
	vals, _ := json.Marshal(env) // a JSON object of strings is a Python dict literal
	run := func(ctx context.Context, code string) error {
		return quietly(ctx, t, v1.CodeRequest{Code: code, ContextID: req.ContextID, TimeoutSeconds: req.TimeoutSeconds}, "setting env_vars")
	}
	set := "import os as _e2b_os\n_e2b_env = " + string(vals) + "\n" +
		"_e2b_saved = {k: _e2b_os.environ.get(k) for k in _e2b_env}\n_e2b_os.environ.update(_e2b_env)\ndel _e2b_env"
	if err := run(ctx, set); err != nil {
		return nil, err
	}
	return func() {
		// Even when the client left: the context's environment must not keep them.
		run(context.WithoutCancel(ctx), "for _e2b_k, _e2b_v in _e2b_saved.items():\n"+
			"    _e2b_os.environ.pop(_e2b_k, None) if _e2b_v is None else _e2b_os.environ.__setitem__(_e2b_k, _e2b_v)\n"+
			"del _e2b_saved")
	}, nil
}

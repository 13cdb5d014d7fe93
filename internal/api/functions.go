package api

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"mime"
	"mime/multipart"
	"net/http"
	"strconv"
	"time"

	"github.com/pandastack/pandastack/internal/auth"
	"github.com/pandastack/pandastack/internal/errdefs"
	"github.com/pandastack/pandastack/internal/functions"
	"github.com/pandastack/pandastack/internal/store"
	v1 "github.com/pandastack/pandastack/internal/wire/v1"
)

// Functions (docs/functions.md): thin handlers over internal/functions.

// maxSpecBytes bounds a deploy's spec part.
const maxSpecBytes = 256 << 10

func (s *Server) functionView(fn store.Function, v store.FunctionVersion) v1.Function {
	return v1.Function{ID: fn.ID, Name: fn.Name, Version: fn.Version, State: v.State, Runtime: v.Runtime, Handler: v.Handler,
		URL: s.functions.URL(fn), CreatedAt: v1.Timestamp(fn.CreatedAt), UpdatedAt: v1.Timestamp(fn.UpdatedAt)}
}

func functionVersionView(v store.FunctionVersion) v1.FunctionVersion {
	return v1.FunctionVersion{FunctionID: v.FunctionID, Version: v.Version, State: v.State, Error: v.Error, Runtime: v.Runtime,
		Handler: v.Handler, Env: orEmptyMap(v.Env), SecretNames: orEmpty(v.SecretNames), TimeoutSeconds: v.TimeoutSeconds, MemoryMiB: v.MemoryMiB,
		MaxConcurrency: v.MaxConcurrency, Retries: v.Retries, BundleBytes: v.BundleBytes, BundleSHA256: v.BundleSHA256,
		SnapshotID: v.SnapshotID, CreatedAt: v1.Timestamp(v.CreatedAt)}
}

func functionRunView(r store.FunctionRun) v1.FunctionRun {
	out := v1.FunctionRun{ID: r.ID, FunctionID: r.FunctionID, Version: r.Version, Trigger: r.Trigger, Status: r.Status,
		Attempts: r.Attempts, Logs: r.Logs, DurationMS: r.DurationMS, CreatedAt: v1.Timestamp(r.CreatedAt),
		FinishedAt: v1.Timestamp(r.FinishedAt)}
	if r.Result != "" {
		out.Result = json.RawMessage(r.Result)
	}
	if r.ErrorType != "" {
		out.Error = &v1.FunctionError{Type: r.ErrorType, Message: r.ErrorMessage, Traceback: r.ErrorTraceback}
	}
	return out
}

// deployFunction takes multipart/form-data with a `spec` part (JSON) and a `bundle` part (.zip
// or .tar.gz), bakes the version and answers 201 with the function.
func (s *Server) deployFunction(w http.ResponseWriter, r *http.Request) {
	id, _ := auth.FromContext(r.Context())
	spec, bundle, err := readDeploy(w, r)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	// The bake is a sandbox of the team's; a new name is one more function (a known one, a new
	// version of it).
	var more Quota
	if _, err := s.store.GetTeamFunctionByName(r.Context(), id.TeamID, spec.Name); errors.Is(err, store.ErrNotFound) {
		more.Functions = 1
	}
	release, err := s.holdSandboxesAnd(r.Context(), id.TeamID, functions.BaseTemplate, 1, more)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	defer release()
	fn, v, err := s.functions.Deploy(r.Context(), id.TeamID, spec, bundle)
	s.reply(w, r, http.StatusCreated, s.functionView(fn, v), err)
}

// readDeploy reads a deploy's two parts, each within its limit.
func readDeploy(w http.ResponseWriter, r *http.Request) (v1.FunctionSpec, []byte, error) {
	var spec v1.FunctionSpec
	mt, params, err := mime.ParseMediaType(r.Header.Get("Content-Type"))
	if err != nil || mt != "multipart/form-data" || params["boundary"] == "" {
		return spec, nil, invalid("send multipart/form-data with a part `spec` (JSON) and a part `bundle` (.zip or .tar.gz)")
	}
	body := http.MaxBytesReader(w, r.Body, functions.MaxBundleBytes+maxSpecBytes+64<<10)
	mr := multipart.NewReader(body, params["boundary"])
	var bundle []byte
	gotSpec := false
	for {
		p, err := mr.NextPart()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return spec, nil, tooLargeOr(err, "the multipart body is malformed: %v", err)
		}
		switch p.FormName() {
		case "spec":
			b, err := io.ReadAll(io.LimitReader(p, maxSpecBytes+1))
			if err != nil {
				return spec, nil, tooLargeOr(err, "reading spec: %v", err)
			}
			if len(b) > maxSpecBytes {
				return spec, nil, errdefs.New(errdefs.TooLarge, "spec is larger than %d bytes", maxSpecBytes)
			}
			dec := json.NewDecoder(bytes.NewReader(b))
			dec.DisallowUnknownFields()
			if err := dec.Decode(&spec); err != nil {
				return spec, nil, invalid("spec is not valid JSON for a function spec: %v", err)
			}
			gotSpec = true
		case "bundle":
			b, err := io.ReadAll(io.LimitReader(p, functions.MaxBundleBytes+1))
			if err != nil {
				return spec, nil, tooLargeOr(err, "reading bundle: %v", err)
			}
			if len(b) > functions.MaxBundleBytes {
				return spec, nil, errdefs.New(errdefs.TooLarge, "bundle is larger than %d bytes (32 MiB)", functions.MaxBundleBytes)
			}
			bundle = b
		default:
			return spec, nil, invalid("unknown part %q: send `spec` and `bundle`", truncate(p.FormName()))
		}
	}
	switch {
	case !gotSpec:
		return spec, nil, invalid("the part `spec` (JSON: name, runtime, handler, …) is missing")
	case bundle == nil:
		return spec, nil, invalid("the part `bundle` (a .zip or .tar.gz of the code) is missing")
	}
	return spec, bundle, nil
}

func tooLargeOr(err error, format string, args ...any) error {
	var mbe *http.MaxBytesError
	if errors.As(err, &mbe) {
		return errdefs.New(errdefs.TooLarge, "the deploy is larger than %d bytes", mbe.Limit)
	}
	return invalid(format, args...)
}

func (s *Server) listFunctions(w http.ResponseWriter, r *http.Request) {
	id, _ := auth.FromContext(r.Context())
	list, err := s.functions.List(r.Context(), id.TeamID)
	out := v1.Functions{Functions: []v1.Function{}}
	for _, fn := range list {
		_, v, gerr := s.functions.Get(r.Context(), id.TeamID, fn.ID)
		if gerr != nil {
			continue // deleted meanwhile
		}
		out.Functions = append(out.Functions, s.functionView(fn, v))
	}
	s.reply(w, r, http.StatusOK, out, err)
}

func (s *Server) getFunction(w http.ResponseWriter, r *http.Request) {
	id, _ := auth.FromContext(r.Context())
	fn, v, err := s.functions.Get(r.Context(), id.TeamID, r.PathValue("id"))
	s.reply(w, r, http.StatusOK, s.functionView(fn, v), err)
}

// invokeFunction runs the function and answers the run (200), or with ?async=1 records it and
// answers 202 at once.
func (s *Server) invokeFunction(w http.ResponseWriter, r *http.Request) {
	id, _ := auth.FromContext(r.Context())
	req, ok := decoded[v1.InvokeRequest](s, w, r, true)
	if !ok {
		return
	}
	release, err := s.holdSandboxQuota(r.Context(), id.TeamID, functions.BaseTemplate, 1)
	if err != nil {
		s.writeError(w, r, err) // every invocation is a sandbox of the team's (an async one: checked now)
		return
	}
	defer release()
	switch r.URL.Query().Get("async") {
	case "", "0", "false":
		ctx, err := functions.WithTransport(r.Context(), r.Header.Get(functions.TransportHeader))
		var run store.FunctionRun
		if err == nil {
			run, err = s.functions.Invoke(ctx, id.TeamID, r.PathValue("id"), req.Payload, "sync")
		}
		s.reply(w, r, http.StatusOK, functionRunView(run), err)
	case "1", "true":
		run, err := s.functions.InvokeAsync(r.Context(), id.TeamID, r.PathValue("id"), req.Payload)
		s.reply(w, r, http.StatusAccepted, functionRunView(run), err)
	default:
		s.writeError(w, r, invalid("async must be 1 or 0"))
	}
}

func (s *Server) getFunctionRun(w http.ResponseWriter, r *http.Request) {
	id, _ := auth.FromContext(r.Context())
	run, err := s.functions.Run(r.Context(), id.TeamID, r.PathValue("id"), r.PathValue("run"))
	s.reply(w, r, http.StatusOK, functionRunView(run), err)
}

// limitParam reads ?limit= (1-MaxListLimit, default DefaultListLimit).
func limitParam(r *http.Request) (int, error) {
	v := r.URL.Query().Get("limit")
	if v == "" {
		return DefaultListLimit, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 || n > MaxListLimit {
		return 0, invalid("limit must be an integer 1-%d", MaxListLimit)
	}
	return n, nil
}

// RunFunctions resumes async invocations whose server stopped (every 30 s) until ctx ends.
func (s *Server) RunFunctions(ctx context.Context) { s.functions.RunTakeOver(ctx, 30*time.Second) }

// Close stops the functions' and apps' background work (async runs and their retries, builds)
// and waits for it.
func (s *Server) Close() {
	s.functions.Close()
	s.apps.Close()
}

// RunApps renews app instances' TTLs and hibernates idle ones (every 10 s) until ctx ends.
func (s *Server) RunApps(ctx context.Context) { s.apps.Run(ctx, 10*time.Second) }

// viewsOf maps records to their wire views (an empty list, never null).
func viewsOf[R, V any](recs []R, view func(R) V) []V {
	out := make([]V, 0, len(recs))
	for _, r := range recs {
		out = append(out, view(r))
	}
	return out
}

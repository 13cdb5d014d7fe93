package hostagent

import (
	"context"
	"errors"
	"io"
	"net/http"
	"os"
	"strconv"

	"github.com/pandastack/pandastack/internal/errdefs"
	"github.com/pandastack/pandastack/internal/guest"
	"github.com/pandastack/pandastack/internal/wire/hostapi"
)

// fileUser returns the `user` query parameter (files run with that user's permissions).
func fileUser(r *http.Request) string { return r.URL.Query().Get("user") }

func filePath(r *http.Request) (string, error) {
	p := r.URL.Query().Get("path")
	if p == "" {
		return "", errdefs.Invalidf("path is required")
	}
	return p, nil
}

// onFile runs fn with the guest of the request's sandbox and the path parameter; on an error it
// answers it and returns false.
func (a *Agent) onFile(w http.ResponseWriter, r *http.Request, fn func(c *guest.Client, path string) error) bool {
	path, err := filePath(r)
	if err == nil {
		err = a.sandboxes.WithGuest(r.Context(), r.PathValue("id"), func(c *guest.Client) error { return fn(c, path) })
	}
	if err != nil {
		writeError(w, err)
		return false
	}
	return true
}

func (a *Agent) handleReadFile(w http.ResponseWriter, r *http.Request) {
	var body io.ReadCloser
	var fi guest.FileInfo
	if !a.onFile(w, r, func(c *guest.Client, path string) (err error) {
		body, fi, err = c.ReadFile(r.Context(), path, fileUser(r))
		return err
	}) {
		return
	}
	defer body.Close()
	w.Header().Set("Content-Type", "application/octet-stream")
	w.Header().Set("Content-Length", strconv.FormatInt(fi.Size, 10))
	w.WriteHeader(200)
	io.Copy(w, body)
}

func (a *Agent) handleWriteFile(w http.ResponseWriter, r *http.Request) {
	var mode os.FileMode
	if m := r.URL.Query().Get("mode"); m != "" {
		v, err := strconv.ParseUint(m, 8, 32)
		if err != nil || v > 0o7777 {
			writeError(w, errdefs.Invalidf("mode %q: give octal permission bits such as 0644", m))
			return
		}
		mode = os.FileMode(v)
	}
	if r.ContentLength > a.cfg.MaxUpload {
		writeError(w, errdefs.New(errdefs.TooLarge, "file is larger than the %d-byte limit", a.cfg.MaxUpload))
		return
	}
	var fi guest.FileInfo
	if !a.onFile(w, r, func(c *guest.Client, path string) (err error) {
		fi, err = c.WriteFile(r.Context(), path, fileUser(r), mode, http.MaxBytesReader(w, r.Body, a.cfg.MaxUpload))
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			err = errdefs.New(errdefs.TooLarge, "file is larger than the %d-byte limit", a.cfg.MaxUpload)
		}
		return err
	}) {
		return
	}
	writeJSON(w, 200, wireStat(fi))
}

// wireStat is the API's view of a guest file.
func wireStat(fi guest.FileInfo) hostapi.Stat {
	return hostapi.Stat{Name: fi.Name, Path: fi.Path, Type: fi.Type, Size: fi.Size, Mode: fi.Mode, MTime: hostapi.Time(fi.Mtime), Target: fi.Target}
}

func (a *Agent) handleStat(w http.ResponseWriter, r *http.Request) {
	a.fileCall(w, r, func(ctx context.Context, c *guest.Client, path, user string) (any, error) {
		fi, err := c.Stat(ctx, path, user)
		return wireStat(fi), err
	})
}

func (a *Agent) handleList(w http.ResponseWriter, r *http.Request) {
	depth := 1
	if d := r.URL.Query().Get("depth"); d != "" {
		v, err := strconv.Atoi(d)
		if err != nil || v < 1 || v > 10 {
			writeError(w, errdefs.Invalidf("depth must be 1-10"))
			return
		}
		depth = v
	}
	a.fileCall(w, r, func(ctx context.Context, c *guest.Client, path, user string) (any, error) {
		entries, err := c.List(ctx, path, user, depth)
		out := hostapi.StatList{Entries: make([]hostapi.Stat, len(entries))}
		for i, fi := range entries {
			out.Entries[i] = wireStat(fi)
		}
		return out, err
	})
}

func (a *Agent) handleRemove(w http.ResponseWriter, r *http.Request) {
	recursive := r.URL.Query().Get("recursive") == "true"
	a.fileCall(w, r, func(ctx context.Context, c *guest.Client, path, user string) (any, error) {
		return nil, c.Remove(ctx, path, user, recursive)
	})
}

func (a *Agent) handleMkdir(w http.ResponseWriter, r *http.Request, body hostapi.MkdirRequest) {
	a.guestCall(w, r, func(ctx context.Context, c *guest.Client) (any, error) {
		if body.Path == "" {
			return nil, errdefs.Invalidf("path is required")
		}
		return nil, c.Mkdir(ctx, body.Path, body.User)
	})
}

func (a *Agent) handleMove(w http.ResponseWriter, r *http.Request, body hostapi.MoveRequest) {
	a.guestCall(w, r, func(ctx context.Context, c *guest.Client) (any, error) {
		if body.From == "" || body.To == "" {
			return nil, errdefs.Invalidf("from and to are required")
		}
		return nil, c.Move(ctx, body.From, body.To, body.User)
	})
}

// fileCall runs a call that takes ?path= and ?user=; a nil result answers 204.
func (a *Agent) fileCall(w http.ResponseWriter, r *http.Request, call func(context.Context, *guest.Client, string, string) (any, error)) {
	var out any
	if a.onFile(w, r, func(c *guest.Client, path string) (err error) {
		out, err = call(r.Context(), c, path, fileUser(r))
		return err
	}) {
		answerOrEmpty(w, out)
	}
}

func (a *Agent) guestCall(w http.ResponseWriter, r *http.Request, call func(context.Context, *guest.Client) (any, error)) {
	var out any
	if err := a.sandboxes.WithGuest(r.Context(), r.PathValue("id"), func(c *guest.Client) (err error) {
		out, err = call(r.Context(), c)
		return err
	}); err != nil {
		writeError(w, err)
		return
	}
	answerOrEmpty(w, out)
}

// answerOrEmpty answers out as JSON, or 204 when it is nil.
func answerOrEmpty(w http.ResponseWriter, out any) {
	if out == nil {
		w.WriteHeader(http.StatusNoContent)
		return
	}
	writeJSON(w, 200, out)
}

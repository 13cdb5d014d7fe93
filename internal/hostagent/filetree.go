package hostagent

import (
	"bufio"
	"compress/gzip"
	"errors"
	"io"
	"net/http"

	"github.com/pandastack/pandastack/internal/errdefs"
	"github.com/pandastack/pandastack/internal/guest"
	"github.com/pandastack/pandastack/internal/wire/hostapi"
	v1 "github.com/pandastack/pandastack/internal/wire/v1"
)

// Directory watch and archives (docs/files.md): thin handlers over the guest agent's watch,
// archive_get and archive_put ops.

func (a *Agent) fileTreeRoutes(mux *http.ServeMux) {
	mux.HandleFunc("GET /v1/sandboxes/{id}/files/watch", a.busy(a.handleWatch))
	mux.HandleFunc("GET /v1/sandboxes/{id}/files/archive", a.busy(a.handleArchiveGet))
	mux.HandleFunc("PUT /v1/sandboxes/{id}/files/archive", a.busy(a.handleArchivePut))
}

// handleWatch streams a directory's changes as NDJSON (hostapi.WatchEvent), the first line
// "ready", until the client goes away. An error before the first line is an error answer;
// after it, the last line.
func (a *Agent) handleWatch(w http.ResponseWriter, r *http.Request) {
	recursive, err := boolParam(r.URL.Query().Get("recursive"))
	if err != nil {
		writeError(w, errdefs.Invalidf("recursive: %v", err))
		return
	}
	nd := newNDJSON(w)
	a.onFile(w, r, func(c *guest.Client, path string) error {
		err := c.Watch(r.Context(), path, fileUser(r), recursive, func(ev guest.WatchEvent) error {
			nd.send(hostapi.WatchEvent{Type: ev.Type, Path: ev.Path, From: ev.From, Dir: ev.Dir, Message: ev.Message})
			return nil
		})
		if nd.started {
			if r.Context().Err() == nil {
				e := errorBody(err).Error
				nd.send(hostapi.WatchEvent{Type: "error", Error: &v1.ErrorDetail{Code: e.Code, Message: e.Message}})
			}
			return nil
		}
		return err
	})
}

// archiveFormats are the ?format= values of an archive download and their content types.
var archiveFormats = map[string]string{"": "application/x-tar", "tar": "application/x-tar", "tar.gz": "application/gzip"}

// handleArchiveGet streams a directory as a tar (?format=tar.gz: gzipped here, on the host's
// CPU). A failure after the first bytes aborts the connection, so a cut archive is never taken
// for a whole one.
func (a *Agent) handleArchiveGet(w http.ResponseWriter, r *http.Request) {
	format := r.URL.Query().Get("format")
	ctype, ok := archiveFormats[format]
	if !ok {
		writeError(w, errdefs.Invalidf("format must be tar or tar.gz"))
		return
	}
	var body io.ReadCloser
	if !a.onFile(w, r, func(c *guest.Client, path string) (err error) {
		body, err = c.ArchiveGet(r.Context(), path, fileUser(r))
		return err
	}) {
		return
	}
	defer body.Close()
	w.Header().Set("Content-Type", ctype)
	w.WriteHeader(200)
	var err error
	if format == "tar.gz" {
		zw, _ := gzip.NewWriterLevel(w, gzip.BestSpeed)
		if _, err = io.Copy(zw, body); err == nil {
			err = zw.Close()
		}
	} else {
		_, err = io.Copy(w, body)
	}
	if err != nil {
		panic(http.ErrAbortHandler)
	}
}

// countedLimit fails once more than max bytes were read through it; failed keeps a read error
// of r's other than EOF (a corrupt gzip stream).
type countedLimit struct {
	r        io.Reader
	left     int64
	exceeded bool
	failed   error
}

var errArchiveTooLarge = errors.New("archive too large")

func (l *countedLimit) Read(p []byte) (int, error) {
	n, err := l.r.Read(p)
	if l.left -= int64(n); l.left < 0 {
		l.exceeded = true
		return 0, errArchiveTooLarge
	}
	if err != nil && err != io.EOF && l.failed == nil {
		l.failed = err
	}
	return n, err
}

// archiveStream is the tar inside body (gunzipped when body is a gzip): body and the tar are
// each cut after max bytes (their exceeded flags say so).
func archiveStream(body io.Reader, max int64) (in, unpacked *countedLimit, err error) {
	in = &countedLimit{r: body, left: max}
	br := bufio.NewReader(in)
	var tarStream io.Reader = br
	if magic, _ := br.Peek(2); len(magic) == 2 && magic[0] == 0x1f && magic[1] == 0x8b {
		zr, err := gzip.NewReader(br)
		if err != nil {
			return nil, nil, errdefs.Invalidf("bad gzip stream: %v", err)
		}
		tarStream = zr
	}
	return in, &countedLimit{r: tarStream, left: max}, nil
}

// handleArchivePut unpacks a tar or tar.gz (told apart by its first bytes) into a directory.
// The body and the tar inside it are each limited to MaxUpload bytes.
func (a *Agent) handleArchivePut(w http.ResponseWriter, r *http.Request) {
	tooLarge := errdefs.New(errdefs.TooLarge, "archive is larger than the %d-byte limit", a.cfg.MaxUpload)
	if r.ContentLength > a.cfg.MaxUpload {
		writeError(w, tooLarge)
		return
	}
	body, unpacked, err := archiveStream(r.Body, a.cfg.MaxUpload)
	if err != nil {
		writeError(w, err)
		return
	}
	var res guest.ArchiveResult
	if !a.onFile(w, r, func(c *guest.Client, path string) (err error) {
		res, err = c.ArchivePut(r.Context(), path, fileUser(r), unpacked)
		switch {
		case body.exceeded || unpacked.exceeded:
			return tooLarge
		case unpacked.failed != nil && body.failed == nil && r.Context().Err() == nil:
			return errdefs.Invalidf("bad gzip stream: %v", unpacked.failed)
		}
		return err
	}) {
		return
	}
	writeJSON(w, 200, hostapi.ArchiveResult{Entries: res.Entries, Bytes: res.Bytes})
}

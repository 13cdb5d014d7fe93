package e2bcompat

import (
	"compress/gzip"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"os"
	"path"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/pandastack/pandastack/internal/agentclient"
	"github.com/pandastack/pandastack/internal/e2bcompat/proto/filesystem"
	"github.com/pandastack/pandastack/internal/e2bcompat/proto/filesystem/filesystemconnect"
	"github.com/pandastack/pandastack/internal/errdefs"
)

// envd's filesystem.Filesystem and /files over PandaStack's files (as the /v1 files endpoints
// reach them), as the user the request names (else the guest's default account, "user").

type filesystemService struct {
	filesystemconnect.UnimplementedFilesystemHandler
	s *Server

	mu       sync.Mutex
	watchers map[string]*watcher // by id: the polling watchers (CreateWatcher)
}

// watcher is a polling watcher: the listing of its last call, compared with the next.
type watcher struct {
	sandboxID, dir string
	depth          int
	withEntry      bool
	last           map[string]seen
}

// maxWatchers bounds the polling watchers one facade keeps.
const maxWatchers = 1024

// entryOf is E2B's EntryInfo of one of our stats.
func entryOf(st agentclient.Stat) *filesystem.EntryInfo {
	perm, _ := strconv.ParseUint(st.Mode, 8, 32)
	mode := os.FileMode(perm)
	e := &filesystem.EntryInfo{Name: st.Name, Path: st.Path, Size: st.Size, Type: filesystem.FileType_FILE_TYPE_FILE}
	switch st.Type {
	case "dir":
		e.Type, mode = filesystem.FileType_FILE_TYPE_DIRECTORY, mode|os.ModeDir
	case "symlink":
		e.Type, mode = filesystem.FileType_FILE_TYPE_SYMLINK, mode|os.ModeSymlink
		e.SymlinkTarget = &st.Target
	}
	e.Mode, e.Permissions = uint32(mode), mode.String()
	if t, err := time.Parse(time.RFC3339Nano, st.MTime); err == nil {
		e.ModifiedTime = timestamppb.New(t)
	}
	return e
}

// stat is the entry of p, or a Connect error.
func stat(ctx context.Context, t target, p string) (*filesystem.EntryInfo, error) {
	st, err := t.files().Stat(ctx, t.sb.ID, p)
	if err != nil {
		return nil, connectErr(err)
	}
	return entryOf(st), nil
}

func (f *filesystemService) Stat(ctx context.Context, req *connect.Request[filesystem.StatRequest]) (*connect.Response[filesystem.StatResponse], error) {
	t := targetOf(ctx)
	e, err := stat(ctx, t, absPath(t.user, req.Msg.GetPath()))
	if err != nil {
		return nil, err
	}
	return connect.NewResponse(&filesystem.StatResponse{Entry: e}), nil
}

// maxListDepth is the deepest listing (the files API's limit).
const maxListDepth = 10

func (f *filesystemService) ListDir(ctx context.Context, req *connect.Request[filesystem.ListDirRequest]) (*connect.Response[filesystem.ListDirResponse], error) {
	t := targetOf(ctx)
	depth := int(req.Msg.GetDepth())
	if depth == 0 {
		depth = 1
	}
	if depth > maxListDepth {
		return nil, connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("depth must be at most %d", maxListDepth))
	}
	sts, err := t.files().List(ctx, t.sb.ID, absPath(t.user, req.Msg.GetPath()), depth)
	if err != nil {
		return nil, connectErr(err)
	}
	out := &filesystem.ListDirResponse{Entries: make([]*filesystem.EntryInfo, 0, len(sts))}
	for _, st := range sts {
		out.Entries = append(out.Entries, entryOf(st))
	}
	return connect.NewResponse(out), nil
}

func (f *filesystemService) MakeDir(ctx context.Context, req *connect.Request[filesystem.MakeDirRequest]) (*connect.Response[filesystem.MakeDirResponse], error) {
	t := targetOf(ctx)
	p := absPath(t.user, req.Msg.GetPath())
	if _, err := t.files().Stat(ctx, t.sb.ID, p); err == nil {
		return nil, connect.NewError(connect.CodeAlreadyExists, fmt.Errorf("%s already exists", p))
	}
	e, err := thenStat(ctx, t, p, t.files().Mkdir(ctx, t.sb.ID, p))
	if err != nil {
		return nil, err
	}
	return connect.NewResponse(&filesystem.MakeDirResponse{Entry: e}), nil
}

// thenStat is the entry of p after a call that made it, or the call's error.
func thenStat(ctx context.Context, t target, p string, callErr error) (*filesystem.EntryInfo, error) {
	if callErr != nil {
		return nil, connectErr(callErr)
	}
	return stat(ctx, t, p)
}

func (f *filesystemService) Move(ctx context.Context, req *connect.Request[filesystem.MoveRequest]) (*connect.Response[filesystem.MoveResponse], error) {
	t := targetOf(ctx)
	from, to := absPath(t.user, req.Msg.GetSource()), absPath(t.user, req.Msg.GetDestination())
	e, err := thenStat(ctx, t, to, t.files().Move(ctx, t.sb.ID, from, to))
	if err != nil {
		return nil, err
	}
	return connect.NewResponse(&filesystem.MoveResponse{Entry: e}), nil
}

func (f *filesystemService) Remove(ctx context.Context, req *connect.Request[filesystem.RemoveRequest]) (*connect.Response[filesystem.RemoveResponse], error) {
	t := targetOf(ctx)
	if err := t.files().Remove(ctx, t.sb.ID, absPath(t.user, req.Msg.GetPath()), true); err != nil {
		return nil, connectErr(err)
	}
	return connect.NewResponse(&filesystem.RemoveResponse{}), nil
}

// readFile is GET /files?path=: the file's bytes.
func (s *Server) readFile(w http.ResponseWriter, r *http.Request) {
	t := targetOf(r.Context())
	p := r.URL.Query().Get("path")
	if p == "" {
		writeError(w, errdefs.Invalidf("path is required"))
		return
	}
	p = absPath(t.user, p)
	if st, err := t.files().Stat(r.Context(), t.sb.ID, p); err == nil && st.Type == "dir" {
		writeError(w, errdefs.Invalidf("%s is a directory", p))
		return
	}
	resp, err := t.files().Read(r.Context(), t.sb.ID, p)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	defer resp.Body.Close()
	w.Header().Set("Content-Type", "application/octet-stream")
	if v := resp.Header.Get("Content-Length"); v != "" {
		w.Header().Set("Content-Length", v)
	}
	w.WriteHeader(http.StatusOK)
	io.Copy(w, resp.Body)
}

// writtenJSON is one entry of POST /files' answer.
type writtenJSON struct {
	Name string `json:"name"`
	Type string `json:"type"`
	Path string `json:"path"`
}

// writeFiles is POST /files: multipart (part "file", its filename the destination when the
// query names no path) or a raw body (octet-stream, optionally gzip) for ?path=.
func (s *Server) writeFiles(w http.ResponseWriter, r *http.Request) {
	t := targetOf(r.Context())
	qpath := r.URL.Query().Get("path")
	if r.ContentLength > s.b.MaxUploadBytes {
		writeError(w, errdefs.New(errdefs.TooLarge, "upload is larger than the %d-byte limit", s.b.MaxUploadBytes))
		return
	}
	r.Body = http.MaxBytesReader(w, r.Body, s.b.MaxUploadBytes)
	var out []writtenJSON
	write := func(p string, body io.Reader) error {
		if p == "" {
			return errdefs.Invalidf("path is required (in the query or as the part's filename)")
		}
		p = absPath(t.user, p)
		st, err := t.files().Write(r.Context(), t.sb.ID, p, body, -1)
		if err != nil {
			var mbe *http.MaxBytesError
			if errors.As(err, &mbe) {
				return errdefs.New(errdefs.TooLarge, "upload is larger than the %d-byte limit", s.b.MaxUploadBytes)
			}
			return err
		}
		out = append(out, writtenJSON{Name: path.Base(p), Type: "file", Path: st.Path})
		return nil
	}
	mt, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type"))
	var err error
	if mt == "multipart/form-data" {
		err = s.writeParts(r, qpath, write)
	} else {
		var body io.Reader = r.Body
		if strings.EqualFold(r.Header.Get("Content-Encoding"), "gzip") {
			var zr *gzip.Reader
			if zr, err = gzip.NewReader(r.Body); err != nil {
				err = errdefs.Invalidf("body is not gzip: %v", err)
			}
			body = zr
		}
		if err == nil {
			err = write(qpath, body)
		}
	}
	if err == nil && len(out) == 0 {
		err = errdefs.Invalidf("no file in the request: send a multipart part named \"file\"")
	}
	if err != nil {
		s.fail(w, r, err)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusOK)
	json.NewEncoder(w).Encode(out)
}

// writeParts writes each "file" part: to qpath when the query names one (a single file), else to
// the part's filename (the SDK puts the destination path there).
func (s *Server) writeParts(r *http.Request, qpath string, write func(string, io.Reader) error) error {
	mr, err := r.MultipartReader()
	if err != nil {
		return errdefs.Invalidf("malformed multipart body: %v", err)
	}
	for {
		part, err := mr.NextPart()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			var mbe *http.MaxBytesError
			if errors.As(err, &mbe) {
				return errdefs.New(errdefs.TooLarge, "upload is larger than the %d-byte limit", s.b.MaxUploadBytes)
			}
			return errdefs.Invalidf("malformed multipart body: %v", err)
		}
		if part.FormName() != "file" {
			part.Close()
			continue
		}
		p := qpath
		if p == "" {
			// The raw filename: Part.FileName keeps only its base name.
			_, params, _ := mime.ParseMediaType(part.Header.Get("Content-Disposition"))
			p = params["filename"]
		}
		err = write(p, part)
		part.Close()
		if err != nil {
			return err
		}
	}
}

// watchInterval is how often WatchDir lists the watched directory: PandaStack's guest has no
// change notification the control plane can follow, so a watch compares listings.
const watchInterval = 500 * time.Millisecond

// seen is what a watch compares of one entry between listings.
type seen struct {
	size        int64
	mtime, mode string
	entry       *filesystem.EntryInfo
}

func (f *filesystemService) WatchDir(ctx context.Context, req *connect.Request[filesystem.WatchDirRequest], stream *connect.ServerStream[filesystem.WatchDirResponse]) error {
	t := targetOf(ctx)
	dir, depth, err := watchTarget(ctx, t, req.Msg.GetPath(), req.Msg.GetRecursive())
	if err != nil {
		return err
	}
	list := func() (map[string]seen, error) { return listing(ctx, t, dir, depth) }
	before, err := list()
	if err != nil {
		return connectErr(err)
	}
	if err := stream.Send(&filesystem.WatchDirResponse{Event: &filesystem.WatchDirResponse_Start{Start: &filesystem.WatchDirResponse_StartEvent{}}}); err != nil {
		return err
	}
	keepalive := keepaliveOf(req.Header().Get("Keepalive-Ping-Interval"))
	lastSent := time.Now()
	tick := time.NewTicker(watchInterval)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
		now, err := list()
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return connectErr(err)
		}
		for _, ev := range diffListings(dir, before, now, req.Msg.GetIncludeEntry()) {
			if err := stream.Send(&filesystem.WatchDirResponse{Event: &filesystem.WatchDirResponse_Filesystem{Filesystem: ev}}); err != nil {
				return err
			}
			lastSent = time.Now()
		}
		before = now
		if time.Since(lastSent) >= keepalive {
			if err := stream.Send(&filesystem.WatchDirResponse{Event: &filesystem.WatchDirResponse_Keepalive{Keepalive: &filesystem.WatchDirResponse_KeepAlive{}}}); err != nil {
				return err
			}
			lastSent = time.Now()
		}
	}
}

// listing is what a watch compares of dir's entries (depth deep).
func listing(ctx context.Context, t target, dir string, depth int) (map[string]seen, error) {
	sts, err := t.files().List(ctx, t.sb.ID, dir, depth)
	if err != nil {
		return nil, err
	}
	out := make(map[string]seen, len(sts))
	for _, st := range sts {
		out[st.Path] = seen{size: st.Size, mtime: st.MTime, mode: st.Mode, entry: entryOf(st)}
	}
	return out, nil
}

// watchTarget checks a watch's directory and returns it with the listing depth.
func watchTarget(ctx context.Context, t target, path string, recursive bool) (string, int, error) {
	dir := absPath(t.user, path)
	depth := 1
	if recursive {
		depth = maxListDepth
	}
	st, err := t.files().Stat(ctx, t.sb.ID, dir)
	if err != nil {
		return "", 0, connectErr(err)
	}
	if st.Type != "dir" {
		return "", 0, connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("%s is not a directory", dir))
	}
	return dir, depth, nil
}

// CreateWatcher starts a polling watcher (the Python sync SDK's watch_dir): each
// GetWatcherEvents answers what changed since the previous call.
func (f *filesystemService) CreateWatcher(ctx context.Context, req *connect.Request[filesystem.CreateWatcherRequest]) (*connect.Response[filesystem.CreateWatcherResponse], error) {
	t := targetOf(ctx)
	dir, depth, err := watchTarget(ctx, t, req.Msg.GetPath(), req.Msg.GetRecursive())
	if err != nil {
		return nil, err
	}
	last, err := listing(ctx, t, dir, depth)
	if err != nil {
		return nil, connectErr(err)
	}
	id := newAccessToken()[:20]
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.watchers == nil {
		f.watchers = map[string]*watcher{}
	}
	if len(f.watchers) >= maxWatchers {
		return nil, connect.NewError(connect.CodeResourceExhausted, fmt.Errorf("too many watchers (%d): remove some with RemoveWatcher", maxWatchers))
	}
	f.watchers[id] = &watcher{sandboxID: t.sb.ID, dir: dir, depth: depth, withEntry: req.Msg.GetIncludeEntry(), last: last}
	return connect.NewResponse(&filesystem.CreateWatcherResponse{WatcherId: id}), nil
}

// watcherOf is the caller's sandbox's watcher id.
func (f *filesystemService) watcherOf(t target, id string) (*watcher, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	w := f.watchers[id]
	if w == nil || w.sandboxID != t.sb.ID {
		return nil, connect.NewError(connect.CodeNotFound, fmt.Errorf("watcher %s not found", truncate(id)))
	}
	return w, nil
}

func (f *filesystemService) GetWatcherEvents(ctx context.Context, req *connect.Request[filesystem.GetWatcherEventsRequest]) (*connect.Response[filesystem.GetWatcherEventsResponse], error) {
	t := targetOf(ctx)
	w, err := f.watcherOf(t, req.Msg.GetWatcherId())
	if err != nil {
		return nil, err
	}
	now, err := listing(ctx, t, w.dir, w.depth)
	if err != nil {
		return nil, connectErr(err)
	}
	f.mu.Lock()
	events := diffListings(w.dir, w.last, now, w.withEntry)
	w.last = now
	f.mu.Unlock()
	return connect.NewResponse(&filesystem.GetWatcherEventsResponse{Events: events}), nil
}

func (f *filesystemService) RemoveWatcher(ctx context.Context, req *connect.Request[filesystem.RemoveWatcherRequest]) (*connect.Response[filesystem.RemoveWatcherResponse], error) {
	t := targetOf(ctx)
	if _, err := f.watcherOf(t, req.Msg.GetWatcherId()); err != nil {
		return nil, err
	}
	f.mu.Lock()
	delete(f.watchers, req.Msg.GetWatcherId())
	f.mu.Unlock()
	return connect.NewResponse(&filesystem.RemoveWatcherResponse{}), nil
}

// diffListings is the events that turn listing before into now, names relative to dir, in path
// order.
func diffListings(dir string, before, now map[string]seen, withEntry bool) []*filesystem.FilesystemEvent {
	var out []*filesystem.FilesystemEvent
	add := func(p string, typ filesystem.EventType, s seen) {
		name := strings.TrimPrefix(strings.TrimPrefix(p, dir), "/")
		ev := &filesystem.FilesystemEvent{Name: name, Type: typ}
		if withEntry && typ != filesystem.EventType_EVENT_TYPE_REMOVE {
			ev.Entry = s.entry
		}
		out = append(out, ev)
	}
	for p, s := range now {
		old, ok := before[p]
		switch {
		case !ok:
			add(p, filesystem.EventType_EVENT_TYPE_CREATE, s)
		case old.size != s.size || old.mtime != s.mtime:
			add(p, filesystem.EventType_EVENT_TYPE_WRITE, s)
		case old.mode != s.mode:
			add(p, filesystem.EventType_EVENT_TYPE_CHMOD, s)
		}
	}
	for p, s := range before {
		if _, ok := now[p]; !ok {
			add(p, filesystem.EventType_EVENT_TYPE_REMOVE, s)
		}
	}
	slices.SortStableFunc(out, func(a, b *filesystem.FilesystemEvent) int { return strings.Compare(a.Name, b.Name) })
	return out
}

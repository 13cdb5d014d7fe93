package guest

import (
	"context"
	"encoding/json"
	"io"
)

// Directory watch and archives (ops watch, archive_get, archive_put):
//
//	watch        Request{Path, Recursive, User}  → FrameResult WatchEvent{Type: "ready"} once the
//	             watches are in place, then a FrameResult WatchEvent per change, until the host
//	             closes the stream
//	archive_get  Request{Path, User}             → FrameResult {} (a directory), FrameData… (a tar
//	             of its contents, names relative to Path), FrameEOF
//	archive_put  Request{Path, User}, FrameData… (a tar), FrameEOF → FrameResult ArchiveResult
//
// archive_put unpacks into Path (made if missing) as User: names with ".." or a leading "/" are
// refused, every path is resolved beneath Path (a symlink, in the tar or already there, never
// leads out of it), hard links must point inside too. Entries apply in order: a refused entry
// ends the call with the entries before it in place.

// Ops.
const (
	OpWatch      = "watch"
	OpArchiveGet = "archive_get"
	OpArchivePut = "archive_put"
)

// Watch event types.
const (
	WatchReady    = "ready"
	WatchCreate   = "create"
	WatchWrite    = "write"
	WatchRemove   = "remove"
	WatchRename   = "rename"
	WatchOverflow = "overflow" // events were lost (a full queue, the kernel's or ours)
)

// Limits.
const (
	// WatchQueue is how many events a watch holds for a slow reader before it drops them (and
	// reports an overflow event).
	WatchQueue = 4096
	// MaxWatchDirs bounds the directories one recursive watch follows.
	MaxWatchDirs = 8192
	// MaxWatches is how many watch streams the agent keeps open at once.
	MaxWatches = 32
	// MaxArchiveEntries bounds the entries of an archive, both ways.
	MaxArchiveEntries = 100000
)

// WatchEvent is one change under a watched directory (also its wire JSON). Path is absolute;
// a rename's From is where it was (a move out of the tree is a remove, into it a create).
type WatchEvent struct {
	Type    string `json:"type"`
	Path    string `json:"path,omitempty"`
	From    string `json:"from,omitempty"`
	Dir     bool   `json:"dir,omitempty"`
	Message string `json:"message,omitempty"`
}

// ArchiveResult is what archive_put made.
type ArchiveResult struct {
	Entries int   `json:"entries"`
	Bytes   int64 `json:"bytes"` // file content written
}

// Watch watches a directory, calling fn with each event (the first is "ready") until ctx ends,
// fn fails or the guest ends the stream.
func (c *Client) Watch(ctx context.Context, path, user string, recursive bool, fn func(WatchEvent) error) error {
	cl, err := c.start(ctx, &Request{Op: OpWatch, Path: path, User: user, Recursive: recursive})
	if err != nil {
		return err
	}
	defer cl.finish()
	for {
		var ev WatchEvent
		if err := cl.expect(FrameResult, &ev); err != nil {
			return err
		}
		if err := fn(ev); err != nil {
			return err
		}
	}
}

// ArchiveGet returns a tar stream of the directory path's contents.
func (c *Client) ArchiveGet(ctx context.Context, path, user string) (io.ReadCloser, error) {
	cl, err := c.opened(ctx, &Request{Op: OpArchiveGet, Path: path, User: user})
	if err != nil {
		return nil, err
	}
	return &fileReader{cl: cl}, nil
}

// ArchivePut unpacks the tar stream r into the directory path.
func (c *Client) ArchivePut(ctx context.Context, path, user string, r io.Reader) (ArchiveResult, error) {
	return uploadOp[ArchiveResult](ctx, c, &Request{Op: OpArchivePut, Path: path, User: user}, r, FrameResult)
}

// String is the event as one line, for logs and the CLI.
func (e WatchEvent) String() string {
	b, _ := json.Marshal(e)
	return string(b)
}

package client

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/url"

	v1 "github.com/pandastack/pandastack/internal/wire/v1"
)

// WatchFiles follows GET …/files/watch, calling each for every event (the first is "ready": the
// watch is in place) until each returns true or an error, or ctx ends (nil then).
func (c *Client) WatchFiles(ctx context.Context, id, path string, recursive bool, each func(ev v1.WatchEvent) (done bool, err error)) error {
	q := url.Values{"path": {path}}
	if recursive {
		q.Set("recursive", "1")
	}
	err := c.streamRequest(ctx, "GET", sbPath(id, "/files/watch"), q, nil, -1, "", "the watch stream ended", 1<<20,
		func(line []byte, rid string) (bool, error) {
			var ev v1.WatchEvent
			if err := json.Unmarshal(line, &ev); err != nil {
				return false, fmt.Errorf("bad line in the watch stream: %w", err)
			}
			if ev.Error != nil {
				return true, streamError(ev.Error, rid)
			}
			return each(ev)
		})
	if ctx.Err() != nil {
		return nil
	}
	return err
}

// DownloadArchive opens a directory of the sandbox as a tar (gzipped: a tar.gz); the caller
// closes it. A read error means the archive was cut.
func (c *Client) DownloadArchive(ctx context.Context, id, path string, gzipped bool) (io.ReadCloser, error) {
	q := url.Values{"path": {path}}
	if gzipped {
		q.Set("format", "tar.gz")
	}
	resp, err := c.Do(ctx, "GET", sbPath(id, "/files/archive"), q, nil, -1, "", "")
	if err != nil {
		return nil, err
	}
	return resp.Body, nil
}

// UploadArchive unpacks a tar or tar.gz stream into a directory of the sandbox (made if
// missing); size < 0 sends it chunked.
func (c *Client) UploadArchive(ctx context.Context, id, path string, r io.Reader, size int64) (v1.ArchiveResult, error) {
	var out v1.ArchiveResult
	return out, c.endpoint().Upload(ctx, "PUT", sbPath(id, "/files/archive"), url.Values{"path": {path}}, r, size, &out)
}

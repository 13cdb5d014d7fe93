// Package blob is PandaStack's object store: the one place artifacts (baked templates, snapshots,
// hibernated sandboxes) go to leave the host that made them. A Store is a flat key space with
// put, get, ranged get, stat, list and delete; drivers are chosen by URL:
//
//	file:///var/lib/pandastack/blobs          one machine (the default for `pandastack up`)
//	s3://BUCKET/PREFIX?endpoint=URL&region=R  any S3 API (AWS, R2, Ceph RGW, versitygw…)
//
// Invariants every driver keeps (blobtest.Run checks them): a Put is atomic — a reader sees the
// whole new object or the old one, never a part; a missing key is an errdefs.NotFound error that
// names the key; Delete of a missing key succeeds; List returns keys relative to the store, in
// lexical order. Keys are validated before any driver sees them (see ValidKey).
package blob

import (
	"context"
	"fmt"
	"io"
	"net/url"
	"strings"
	"time"

	"github.com/pandastack/pandastack/internal/errdefs"
)

// SmallObjectsCheap reports whether many small objects cost s about what fewer large ones of the
// same bytes do: true of a directory; false of S3, where each object is a request (measured on
// versitygw: 64 MiB in 1 MiB objects pulled 1.7–2.2 s, in 4 MiB objects 0.4–1.2 s) and of a
// Store wrapped by another type.
func SmallObjectsCheap(s Store) bool {
	c, ok := s.(interface{ smallObjectsCheap() bool })
	return ok && c.smallObjectsCheap()
}

// Store is an object store addressed by key.
type Store interface {
	// Put stores body under key, replacing what was there. body is read from its start.
	Put(ctx context.Context, key string, body io.ReadSeeker) error
	// Get opens the object under key.
	Get(ctx context.Context, key string) (io.ReadCloser, error)
	// GetRange opens length bytes of the object from offset (fewer at its end).
	GetRange(ctx context.Context, key string, offset, length int64) (io.ReadCloser, error)
	// Stat describes the object under key.
	Stat(ctx context.Context, key string) (Info, error)
	// List calls fn for each object whose key starts with prefix, in key order; an error from fn
	// stops the walk and is returned.
	List(ctx context.Context, prefix string, fn func(Info) error) error
	// Delete removes the object under key; a missing one is not an error.
	Delete(ctx context.Context, key string) error
	// String is the store's URL, without credentials: safe to log and to show.
	String() string
}

// Info describes one object.
type Info struct {
	Key      string
	Size     int64
	Modified time.Time
}

// MaxKeyLen is the longest key accepted (S3's limit).
const MaxKeyLen = 1024

// ValidKey reports why key cannot name an object, or nil: keys are slash-separated segments of
// printable ASCII (no backslash), none empty, "." or "..", at most MaxKeyLen bytes.
func ValidKey(key string) error {
	if key == "" {
		return errdefs.Invalidf("blob key is empty")
	}
	if len(key) > MaxKeyLen {
		return errdefs.Invalidf("blob key is %d bytes, longer than %d", len(key), MaxKeyLen)
	}
	for _, c := range []byte(key) {
		if c < 0x21 || c > 0x7e || c == '\\' {
			return errdefs.Invalidf("blob key %q has a byte outside printable ASCII (or a backslash)", key)
		}
	}
	for _, seg := range strings.Split(key, "/") {
		if seg == "" || seg == "." || seg == ".." {
			return errdefs.Invalidf("blob key %q has an empty, \".\" or \"..\" segment", key)
		}
	}
	return nil
}

// validPrefix accepts "" (everything) or a key prefix (which may end in "/").
func validPrefix(prefix string) error {
	if prefix == "" {
		return nil
	}
	return ValidKey(strings.TrimSuffix(prefix, "/"))
}

func notFound(key string) error { return errdefs.NotFoundf("blob %s not found", key) }

// Open returns the store named by rawURL (see the package comment for the forms).
func Open(ctx context.Context, rawURL string) (Store, error) {
	u, err := url.Parse(rawURL)
	if err != nil {
		return nil, errdefs.Invalidf("blob store URL %q: %v", redact(rawURL), err)
	}
	switch u.Scheme {
	case "file":
		if u.Host != "" && u.Host != "localhost" {
			return nil, errdefs.Invalidf("blob store URL %q: a file URL names a local path (file:///dir)", redact(rawURL))
		}
		return OpenFile(u.Path)
	case "s3":
		return openS3(ctx, u)
	case "":
		return nil, errdefs.Invalidf("blob store URL %q has no scheme: use file:///dir or s3://bucket/prefix", redact(rawURL))
	}
	return nil, errdefs.Invalidf("blob store URL %q: unknown scheme %q (file or s3)", redact(rawURL), u.Scheme)
}

// redact drops a userinfo part from a URL before it is quoted, so a secret pasted into the URL
// never reaches a log or an answer.
func redact(rawURL string) string {
	scheme, rest, ok := strings.Cut(rawURL, "://")
	if !ok {
		return rawURL
	}
	host, path, _ := strings.Cut(rest, "/")
	if i := strings.LastIndex(host, "@"); i >= 0 {
		host = "REDACTED@" + host[i+1:]
	}
	if path != "" || strings.Contains(rest, "/") {
		return fmt.Sprintf("%s://%s/%s", scheme, host, path)
	}
	return scheme + "://" + host
}

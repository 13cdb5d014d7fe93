package sandboxes

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"

	"github.com/pandastack/pandastack/internal/agentclient"
)

// Where the operator's extra CA certificates (Config.GuestCA, `--guest-ca-file`) go in a guest:
// their own file, which update-ca-certificates also picks up if the sandbox runs it, and a
// marked block of the system bundle that OpenSSL, curl, git, Python's ssl and Go read.
const (
	GuestCAFile   = "/usr/local/share/ca-certificates/pandastack-extra.crt"
	GuestCABundle = "/etc/ssl/certs/ca-certificates.crt"
	guestCABegin  = "# pandastack extra CA certificates: begin\n"
	guestCAEnd    = "# pandastack extra CA certificates: end\n"
	// MaxGuestCA bounds the PEM (Debian's whole bundle is ~220 KB).
	MaxGuestCA = 512 << 10
	// maxBundle bounds the system bundle read back from a guest.
	maxBundle = 8 << 20
)

// GuestCAEnv is the environment every exec of a sandbox gets (under the create's own env) when
// the operator gave extra CA certificates: what Node.js (which has its own list) and Python's
// requests and pip (certifi's list) read instead of the system bundle.
func GuestCAEnv() map[string]string {
	return map[string]string{
		"NODE_EXTRA_CA_CERTS": GuestCAFile,
		"REQUESTS_CA_BUNDLE":  GuestCABundle,
		"PIP_CERT":            GuestCABundle,
		"SSL_CERT_FILE":       GuestCABundle,
	}
}

// withGuestCAEnv is env with the CA variables under it (the create's own win), or env itself
// when there are no extra CA certificates.
func (s *Service) withGuestCAEnv(env map[string]string) map[string]string {
	if len(s.guestCA) == 0 {
		return env
	}
	out := GuestCAEnv()
	maps.Copy(out, env)
	return out
}

// caBlock is the marked block of pem in a bundle.
func caBlock(pem []byte) []byte {
	pem = bytes.TrimRight(pem, "\n")
	return []byte(guestCABegin + string(pem) + "\n" + guestCAEnd)
}

// withCABlock is bundle with its marked block (if any) replaced by pem's at the end, and whether
// that changes it.
func withCABlock(bundle, pem []byte) ([]byte, bool) {
	block := caBlock(pem)
	if i := bytes.Index(bundle, []byte(guestCABegin)); i >= 0 && (i == 0 || bundle[i-1] == '\n') {
		rest := bundle[i:]
		if bytes.HasPrefix(rest, block) && len(bytes.TrimSpace(rest[len(block):])) == 0 {
			return bundle, false // the same set, already at the end
		}
		end := bytes.Index(rest, []byte(guestCAEnd))
		if end < 0 {
			end = len(rest) // a cut block: everything after its start goes
		} else {
			end += len(guestCAEnd)
		}
		bundle = append(bytes.Clone(bundle[:i]), rest[end:]...)
	}
	if len(bundle) > 0 && bundle[len(bundle)-1] != '\n' {
		bundle = append(bundle, '\n')
	}
	return append(bundle, block...), true
}

// bundleSeen is what installGuestCA found in a source's bundle: its stat, and what to write
// (nil: it has the certificates already).
type bundleSeen struct {
	size   int64
	mtime  string
	merged []byte
}

// maxBundlesSeen bounds the cache of bundles seen (a template's or snapshot's, per host).
const maxBundlesSeen = 64

// installGuestCA puts the operator's extra CA certificates into sandbox id's trust store before
// the create returns, through the files API as root (no process in the guest): the system
// bundle is read and, unless it has them already (a restore of a snapshot made with them),
// written back with its marked block replaced, beside GuestCAFile. Every sandbox restored from
// one source (a template or snapshot on a host) starts with the same bundle: what was found is
// kept by the source and the bundle's size and mtime, so that later creates stat it instead of
// reading it back (~220 KB through the guest channel). Nothing when there are no certificates.
func (s *Service) installGuestCA(ctx context.Context, c *agentclient.Client, id, source string) error {
	if len(s.guestCA) == 0 {
		return nil
	}
	root := c.FilesAs("root")
	var ae *agentclient.Error
	st, err := root.Stat(ctx, id, GuestCABundle)
	missing := errors.As(err, &ae) && ae.Status == http.StatusNotFound
	if err != nil && !missing {
		return fmt.Errorf("installing the extra CA certificates: %s: %w", GuestCABundle, err)
	}
	s.caMu.Lock()
	seen, ok := s.caSeen[source]
	s.caMu.Unlock()
	if !ok || missing || seen.size != st.Size || seen.mtime != st.MTime {
		var bundle []byte
		if !missing {
			if bundle, err = readBundle(ctx, root, id); err != nil {
				return fmt.Errorf("installing the extra CA certificates: reading %s: %w", GuestCABundle, err)
			}
		}
		seen = bundleSeen{size: st.Size, mtime: st.MTime}
		if out, changed := withCABlock(bundle, s.guestCA); changed {
			seen.merged = out
		}
		if !missing {
			s.caMu.Lock()
			if len(s.caSeen) >= maxBundlesSeen {
				clear(s.caSeen)
			}
			s.caSeen[source] = seen
			s.caMu.Unlock()
		}
	}
	if seen.merged == nil {
		return nil
	}
	for _, f := range []struct {
		path string
		body []byte
	}{{GuestCAFile, s.guestCA}, {GuestCABundle, seen.merged}} {
		if _, err := root.Write(ctx, id, f.path, bytes.NewReader(f.body), int64(len(f.body))); err != nil {
			return fmt.Errorf("installing the extra CA certificates: writing %s: %w", f.path, err)
		}
	}
	return nil
}

// readBundle reads the system bundle of sandbox id (at most maxBundle bytes).
func readBundle(ctx context.Context, root agentclient.Files, id string) ([]byte, error) {
	resp, err := root.Read(ctx, id, GuestCABundle)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, maxBundle+1))
	if err == nil && len(b) > maxBundle {
		err = fmt.Errorf("it is over %d bytes", maxBundle)
	}
	return b, err
}

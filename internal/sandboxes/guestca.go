package sandboxes

import (
	"context"
	"fmt"
	"maps"
	"time"

	"github.com/pandastack/pandastack/internal/agentclient"
)

// Where the operator's extra CA certificates (Config.GuestCA, `--guest-ca-file`) go in a guest:
// their own file, which update-ca-certificates also picks up if the sandbox runs it, and a
// marked block appended to the system bundle that OpenSSL, curl, git, Python's ssl and Go read.
const (
	GuestCAFile    = "/usr/local/share/ca-certificates/pandastack-extra.crt"
	GuestCABundle  = "/etc/ssl/certs/ca-certificates.crt"
	guestCABegin   = "# pandastack extra CA certificates: begin"
	guestCAEnd     = "# pandastack extra CA certificates: end"
	guestCATimeout = 60 * time.Second
	// MaxGuestCA bounds the PEM (it travels in one exec request; Debian's whole bundle is ~220 KB).
	MaxGuestCA = 512 << 10
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

// guestCAScript installs the PEM on its stdin as file and a marked block of bundle (created if
// missing); a no-op when the same certificates are there already (a restore of a snapshot made
// with them). Another set replaces the marked block.
func guestCAScript(file, bundle string) string {
	return fmt.Sprintf(`set -e
x=%[1]s
b=%[2]s
pem=$(cat)
if [ -f "$x" ] && [ "$(cat "$x")" = "$pem" ] && grep -qxF '%[3]s' "$b" 2>/dev/null; then exit 0; fi
mkdir -p "${x%%/*}" "${b%%/*}"
printf '%%s\n' "$pem" > "$x.tmp" && chmod 644 "$x.tmp" && mv "$x.tmp" "$x"
touch "$b"
sed '/^%[3]s$/,/^%[4]s$/d' "$b" > "$b.tmp"
{ echo '%[3]s'; cat "$x"; echo '%[4]s'; } >> "$b.tmp"
chmod 644 "$b.tmp" && mv "$b.tmp" "$b"
`, file, bundle, guestCABegin, guestCAEnd)
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

// installGuestCA puts the operator's extra CA certificates into sandbox id's trust store, as
// root, before the create returns (one exec; nothing when there are none).
func (s *Service) installGuestCA(ctx context.Context, c *agentclient.Client, id string) error {
	if len(s.guestCA) == 0 {
		return nil
	}
	pem := string(s.guestCA)
	timeout := guestCATimeout.Seconds()
	r, err := c.Exec(ctx, id, agentclient.ExecRequest{Argv: []string{"/bin/sh", "-c", guestCAScript(GuestCAFile, GuestCABundle)}, User: "root",
		Stdin: &pem, TimeoutSeconds: &timeout})
	if err != nil {
		return fmt.Errorf("installing the extra CA certificates: %w", err)
	}
	if r.ExitCode != 0 {
		return fmt.Errorf("installing the extra CA certificates: exit %d: %s", r.ExitCode, Truncate(r.Stderr))
	}
	return nil
}

// Package auth owns API keys: their format (`pds_` + 32 base62 characters), generation, hashing
// (only the SHA-256 of a key is stored, with a short display prefix), verification in constant
// time, the admin flag, first-key bootstrap, and the HTTP middleware that turns a bearer key into
// the caller's team.
package auth

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"errors"
	"fmt"
	"math/big"
	"net/http"
	"strings"
	"time"

	"github.com/pandastack/pandastack/internal/errdefs"
	"github.com/pandastack/pandastack/internal/store"
)

const (
	// KeyPrefix starts every API key.
	KeyPrefix = "pds_"
	// SecretLen is the number of base62 characters after the prefix (~190 bits).
	SecretLen = 32
	// DisplayLen is how much of a key is kept in clear for lookup and display ("pds_" + 8).
	DisplayLen = len(KeyPrefix) + 8
	// DefaultTeam is the team `pandastack up` and a fresh server put their first key in.
	DefaultTeam = "default"
)

const base62 = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"

// Error is an authentication failure (kind errdefs.Unauthorized); Message is safe to show the
// caller.
type Error = errdefs.Error

func unauthorized(msg string) *Error { return errdefs.New(errdefs.Unauthorized, "%s", msg) }
func forbidden(msg string) *Error    { return errdefs.New(errdefs.Forbidden, "%s", msg) }

var (
	errMissing   = unauthorized("missing API key: send the header `Authorization: Bearer pds_…` (set PANDASTACK_API_KEY for the SDKs and CLI)")
	errMalformed = unauthorized(fmt.Sprintf("malformed API key: expected %q followed by %d letters and digits", KeyPrefix, SecretLen))
	errUnknown   = unauthorized("invalid API key: no such key (use a key this server made; a lost admin key is replaced on the server's machine, as root: pandastack keys create --admin --data-dir DIR)")
	errRevoked   = unauthorized("API key revoked")
)

// NewKey returns a fresh random key.
func NewKey() (string, error) { return NewSecret(KeyPrefix) }

// NewSecret is prefix followed by SecretLen random base62 characters (an API key, a sandbox's
// traffic token).
func NewSecret(prefix string) (string, error) {
	s, err := RandomString(SecretLen, base62)
	if err != nil {
		return "", err
	}
	return prefix + s, nil
}

// RandomString returns n characters drawn uniformly from alphabet with crypto/rand.
func RandomString(n int, alphabet string) (string, error) {
	b := make([]byte, n)
	max := big.NewInt(int64(len(alphabet)))
	for i := range b {
		v, err := rand.Int(rand.Reader, max)
		if err != nil {
			return "", err
		}
		b[i] = alphabet[v.Int64()]
	}
	return string(b), nil
}

// Validate checks the key's shape without touching the store.
func Validate(key string) error {
	if !strings.HasPrefix(key, KeyPrefix) || len(key) != len(KeyPrefix)+SecretLen {
		return errMalformed
	}
	for i := len(KeyPrefix); i < len(key); i++ {
		if strings.IndexByte(base62, key[i]) < 0 {
			return errMalformed
		}
	}
	return nil
}

// Hash is the stored form of a key: hex SHA-256. Keys are long random secrets, so a fast hash is
// enough (no password stretching needed).
func Hash(key string) string {
	sum := sha256.Sum256([]byte(key))
	return hex.EncodeToString(sum[:])
}

// DisplayPrefix is the part of a key kept in clear.
func DisplayPrefix(key string) string {
	if len(key) < DisplayLen {
		return key
	}
	return key[:DisplayLen]
}

// Identity is who a request acts as.
type Identity struct {
	TeamID string
	KeyID  string
	Admin  bool
	Scopes []string // what the key may call (EffectiveScopes)
}

// Authenticator verifies keys against the store.
type Authenticator struct {
	Store *store.Store
	Now   func() time.Time // judges expiry; nil: time.Now
}

// Authenticate checks a bearer key: shape first (no store access for garbage), then the stored
// hash, compared in constant time among the keys sharing its display prefix.
func (a *Authenticator) Authenticate(ctx context.Context, key string) (Identity, error) {
	if key == "" {
		return Identity{}, errMissing
	}
	if err := Validate(key); err != nil {
		return Identity{}, err
	}
	return a.lookup(ctx, key)
}

// lookup finds a well-formed key among the stored ones.
func (a *Authenticator) lookup(ctx context.Context, key string) (Identity, error) {
	cands, err := a.Store.KeysByPrefix(ctx, DisplayPrefix(key))
	if err != nil {
		return Identity{}, err
	}
	want, _ := hex.DecodeString(Hash(key))
	for _, k := range cands {
		got, err := hex.DecodeString(k.Hash)
		if err != nil || subtle.ConstantTimeCompare(got, want) != 1 {
			continue
		}
		if k.Revoked() {
			return Identity{}, errRevoked
		}
		now := time.Now
		if a.Now != nil {
			now = a.Now
		}
		if k.Expired(now()) {
			return Identity{}, unauthorized("API key expired at " + k.ExpiresAt.UTC().Format(time.RFC3339) + ": make a new one (pandastack keys create)")
		}
		return Identity{TeamID: k.TeamID, KeyID: k.ID, Admin: k.Admin, Scopes: EffectiveScopes(k)}, nil
	}
	return Identity{}, errUnknown
}

// BearerToken extracts the token of an `Authorization: Bearer …` header ("" if absent).
func BearerToken(r *http.Request) (string, bool) {
	h := r.Header.Get("Authorization")
	if h == "" {
		return "", false
	}
	scheme, tok, ok := strings.Cut(h, " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return "", true
	}
	return strings.TrimSpace(tok), true
}

type ctxKey struct{}

// WithIdentity returns ctx carrying id.
func WithIdentity(ctx context.Context, id Identity) context.Context {
	return context.WithValue(ctx, ctxKey{}, id)
}

// FromContext returns the identity the middleware resolved.
func FromContext(ctx context.Context) (Identity, bool) {
	id, ok := ctx.Value(ctxKey{}).(Identity)
	return id, ok
}

// Middleware authenticates every request before next. onError writes the failure: an *Error
// (Unauthorized) becomes a 401, anything else (the store is down) a 500.
func (a *Authenticator) Middleware(next http.Handler, onError func(http.ResponseWriter, *http.Request, error)) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		tok, present := BearerToken(r)
		if present && tok == "" {
			onError(w, r, unauthorized("malformed Authorization header: expected `Bearer pds_…`"))
			return
		}
		id, err := a.Authenticate(r.Context(), tok)
		if err != nil {
			onError(w, r, err)
			return
		}
		next.ServeHTTP(w, r.WithContext(WithIdentity(r.Context(), id)))
	})
}

// E2B keys: the stock E2B SDKs check a key against ^e2b_[0-9a-f]+$ in some releases, so keys for
// the E2B facade (internal/e2bcompat) are "e2b_" + 40 hex characters (160 bits). They are stored
// hashed like every key, in the same table, and work only on the facade: the /v1 API refuses them
// as malformed, and the facade refuses every other key.
const (
	E2BKeyPrefix = "e2b_"
	E2BSecretLen = 40
)

var errE2BMalformed = unauthorized(fmt.Sprintf("malformed API key: the E2B API takes keys made by `pandastack keys create --e2b` (%q followed by %d hex digits) in X-API-KEY", E2BKeyPrefix, E2BSecretLen))

// NewE2BKey returns a fresh random E2B key.
func NewE2BKey() (string, error) {
	s, err := RandomString(E2BSecretLen, "0123456789abcdef")
	return E2BKeyPrefix + s, err
}

// ValidateE2B checks an E2B key's shape without touching the store.
func ValidateE2B(key string) error {
	if !strings.HasPrefix(key, E2BKeyPrefix) || len(key) != len(E2BKeyPrefix)+E2BSecretLen {
		return errE2BMalformed
	}
	for i := len(E2BKeyPrefix); i < len(key); i++ {
		if c := key[i]; (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return errE2BMalformed
		}
	}
	return nil
}

// AuthenticateE2B checks an E2B key (from X-API-KEY) as Authenticate checks a bearer key.
func (a *Authenticator) AuthenticateE2B(ctx context.Context, key string) (Identity, error) {
	if key == "" {
		return Identity{}, unauthorized("missing API key: send the header X-API-KEY (set E2B_API_KEY to a key from `pandastack keys create --e2b`)")
	}
	if err := ValidateE2B(key); err != nil {
		return Identity{}, err
	}
	return a.lookup(ctx, key)
}

// NewID returns prefix + 20 random lowercase letters and digits (ids are opaque to clients).
func NewID(prefix string) string {
	s, err := RandomString(20, "0123456789abcdefghijklmnopqrstuvwxyz")
	if err != nil {
		panic(err) // crypto/rand does not fail on Linux
	}
	return prefix + s
}

// IssueKey makes a new key for a team, stores its hash and returns the record and the secret
// (shown to the user once, never stored).
func IssueKey(ctx context.Context, st *store.Store, teamID, name string, admin bool) (store.APIKey, string, error) {
	return Issue(ctx, st, store.APIKey{TeamID: teamID, Name: name, Admin: admin})
}

// Issue makes a new key like k (team, name, admin, scopes, expiry), stores its hash and returns
// the record and the secret.
func Issue(ctx context.Context, st *store.Store, k store.APIKey) (store.APIKey, string, error) {
	return issue(ctx, st, k, NewKey)
}

// IssueE2B is Issue for a key of the E2B facade (e2b_ + 40 hex).
func IssueE2B(ctx context.Context, st *store.Store, k store.APIKey) (store.APIKey, string, error) {
	return issue(ctx, st, k, NewE2BKey)
}

func issue(ctx context.Context, st *store.Store, k store.APIKey, newKey func() (string, error)) (store.APIKey, string, error) {
	secret, err := newKey()
	if err != nil {
		return store.APIKey{}, "", err
	}
	rec := keyRecord(k.TeamID, k.Name, k.Admin, secret)
	rec.Scopes, rec.ExpiresAt = k.Scopes, k.ExpiresAt
	k, err = st.CreateKey(ctx, rec)
	return k, secret, err
}

func keyRecord(teamID, name string, admin bool, secret string) store.APIKey {
	return store.APIKey{ID: NewID("key_"), TeamID: teamID, Name: name, Prefix: DisplayPrefix(secret), Hash: Hash(secret), Admin: admin}
}

// CreateTeam makes a team with its first (non-admin) key and returns the secret.
func CreateTeam(ctx context.Context, st *store.Store, name string) (store.Team, store.APIKey, string, error) {
	secret, err := NewKey()
	if err != nil {
		return store.Team{}, store.APIKey{}, "", err
	}
	t, k, err := st.CreateTeamWithKey(ctx, store.Team{ID: NewID("team_"), Name: name}, keyRecord("", "first key", false, secret))
	return t, k, secret, err
}

// addToDefaultTeam stores key rec in the default team, making the team if there is none yet.
func addToDefaultTeam(ctx context.Context, st *store.Store, rec store.APIKey) (store.APIKey, error) {
	team, err := st.GetTeamByName(ctx, DefaultTeam)
	switch {
	case errors.Is(err, store.ErrNotFound):
		_, rec, err = st.CreateTeamWithKey(ctx, store.Team{ID: NewID("team_"), Name: DefaultTeam}, rec)
	case err == nil:
		rec.TeamID = team.ID
		rec, err = st.CreateKey(ctx, rec)
	}
	return rec, err
}

// RecoverAdminKey makes a new admin key of the default team, whatever keys the store has: the
// local recovery of `pandastack keys create --admin --data-dir` (root on the store's machine,
// reading the store directly) when no admin key is at hand. It returns the record and the secret.
func RecoverAdminKey(ctx context.Context, st *store.Store, name string) (store.APIKey, string, error) {
	secret, err := NewKey()
	if err != nil {
		return store.APIKey{}, "", err
	}
	k, err := addToDefaultTeam(ctx, st, keyRecord("", name, true, secret))
	return k, secret, err
}

// Bootstrap makes the first admin key of a store that has no keys at all: preset (if not empty,
// e.g. PANDASTACK_API_KEY) becomes that key, otherwise a random one is made. It returns the
// secret and true when it created the key; on a store that already has keys it does nothing.
func Bootstrap(ctx context.Context, st *store.Store, preset string) (string, bool, error) {
	n, err := st.CountKeys(ctx)
	if err != nil || n > 0 {
		return "", false, err
	}
	secret := preset
	if secret == "" {
		if secret, err = NewKey(); err != nil {
			return "", false, err
		}
	} else if err := Validate(secret); err != nil {
		return "", false, fmt.Errorf("the preset API key is not usable: %w", err)
	}
	_, err = addToDefaultTeam(ctx, st, keyRecord("", "bootstrap admin key", true, secret))
	if errors.Is(err, store.ErrConflict) {
		// Another replica bootstrapped at the same moment; its key stands.
		return "", false, nil
	}
	if err != nil {
		return "", false, err
	}
	return secret, true, nil
}

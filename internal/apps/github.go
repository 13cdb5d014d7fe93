package apps

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"net"
	"net/url"
	"os"
	"regexp"
	"strings"
	"time"

	"github.com/pandastack/pandastack/internal/auth"
	"github.com/pandastack/pandastack/internal/errdefs"
	"github.com/pandastack/pandastack/internal/sealed"
	"github.com/pandastack/pandastack/internal/store"
)

// GitHub push-to-deploy: an app connected to a repository gets a webhook secret; GitHub's push
// events (signed with it: X-Hub-Signature-256, HMAC-SHA256 of the raw body) to the app's branch
// are cloned from the payload's clone URL and deployed, asynchronously (a push to another
// branch: its preview). A delivery id
// (X-GitHub-Delivery) seen before is ignored.

// MaxWebhookBytes bounds a webhook's body (GitHub caps payloads at 25 MB).
const MaxWebhookBytes = 25 << 20

// MaxTokenBytes bounds a repository token (GitHub's are well under).
const MaxTokenBytes = 1024

// CloneTimeout bounds the clone of a pushed commit.
const CloneTimeout = 5 * time.Minute

var repoPattern = regexp.MustCompile(`^[A-Za-z0-9_.-]{1,100}/[A-Za-z0-9_.-]{1,100}$`)

// ConnectGitHub connects the team's app to GitHub repository repo ("owner/name"), its pushes to
// branch (empty: the app's) deploying it, and returns the app and the webhook's new secret (shown
// once; connecting again makes a new one).
//
// token, when set, is a credential that reads a private repository (a GitHub personal access or
// installation token): sealed with the webhook secret, never answered, sent only to clone a
// pushed commit — as HTTP basic auth (user x-access-token), over https (or http to a loopback
// address), without following redirects, through git's environment (never its arguments).
func (s *Service) ConnectGitHub(ctx context.Context, teamID, id, repo, branch, token string) (store.App, string, error) {
	a, err := s.Get(ctx, teamID, id)
	if err != nil {
		return a, "", err
	}
	if !repoPattern.MatchString(repo) {
		return a, "", errdefs.Invalidf("repo must be owner/name, as on GitHub")
	}
	if len(token) > MaxTokenBytes || strings.IndexFunc(token, func(r rune) bool { return r <= ' ' || r == 0x7f }) >= 0 {
		return a, "", errdefs.Invalidf("token is at most %d bytes of printable characters, without spaces", MaxTokenBytes)
	}
	if branch != "" {
		if !branchPattern.MatchString(branch) || strings.Contains(branch, "..") {
			return a, "", errdefs.Invalidf("branch must be a git branch name")
		}
		a.Branch = branch
	}
	secret, err := auth.NewSecret("whsec_")
	if err != nil {
		return a, "", err
	}
	sec := map[string]string{"secret": secret}
	if token != "" {
		sec["token"] = token
	}
	if a.GitHubSecret, err = sealed.Seal(s.cfg.SecretsKey, sec); err != nil {
		return a, "", err
	}
	a.GitHubRepo = repo
	a, err = s.cfg.Store.UpdateApp(ctx, a)
	return a, secret, err
}

// pushEvent is what a push webhook's payload says that matters here.
type pushEvent struct {
	Ref        string `json:"ref"`
	After      string `json:"after"`
	Deleted    bool   `json:"deleted"`
	Repository struct {
		FullName string `json:"full_name"`
		CloneURL string `json:"clone_url"`
	} `json:"repository"`
}

var shaPattern = regexp.MustCompile(`^[0-9a-f]{40}$`)

// Webhook handles one GitHub delivery for app id: the signature checked in constant time
// (errdefs.Unauthorized when wrong), a repeated delivery ignored, a push to the app's branch
// cloned and deployed in the background. It answers at once with what it did.
func (s *Service) Webhook(ctx context.Context, id, event, delivery, signature string, body []byte) (string, error) {
	a, err := s.cfg.Store.GetApp(ctx, id)
	if errors.Is(err, store.ErrNotFound) || err == nil && a.GitHubRepo == "" {
		return "", errdefs.NotFoundf("no app %s is connected to GitHub", id)
	}
	if err != nil {
		return "", err
	}
	sec, err := sealed.Open(s.cfg.SecretsKey, a.GitHubSecret)
	if err != nil {
		return "", err
	}
	mac := hmac.New(sha256.New, []byte(sec["secret"]))
	mac.Write(body)
	got, err := hex.DecodeString(strings.TrimPrefix(signature, "sha256="))
	if err != nil || !strings.HasPrefix(signature, "sha256=") || !hmac.Equal(got, mac.Sum(nil)) {
		return "", errdefs.New(errdefs.Unauthorized, "the X-Hub-Signature-256 does not match the body and the webhook's secret")
	}
	if delivery == "" || len(delivery) > 100 {
		return "", errdefs.Invalidf("X-GitHub-Delivery is required (at most 100 characters)")
	}
	if fresh, err := s.cfg.Store.ClaimDelivery(ctx, a.ID, delivery); err != nil {
		return "", err
	} else if !fresh {
		return "duplicate delivery: ignored", nil
	}
	switch event {
	case "ping":
		return "pong", nil
	case "push":
	default:
		return "event " + event + " ignored", nil
	}
	var ev pushEvent
	if err := json.Unmarshal(body, &ev); err != nil {
		return "", errdefs.Invalidf("the push payload is not JSON: %v", err)
	}
	switch {
	case !strings.EqualFold(ev.Repository.FullName, a.GitHubRepo):
		return "", errdefs.Invalidf("the push is for %s; the app is connected to %s", ev.Repository.FullName, a.GitHubRepo)
	case ev.Deleted || !strings.HasPrefix(ev.Ref, "refs/heads/"):
		return "push to " + ev.Ref + " ignored (not a branch's new commit)", nil
	case !shaPattern.MatchString(ev.After):
		return "", errdefs.Invalidf("the push's after is not a commit id")
	case !strings.HasPrefix(ev.Repository.CloneURL, "https://") && !strings.HasPrefix(ev.Repository.CloneURL, "http://"):
		return "", errdefs.Invalidf("the push's clone_url must be http(s)")
	}
	s.bg.Go(func() {
		if _, err := s.deployPushed(a, ev, sec["token"]); err != nil {
			s.log.Warn("apps: a GitHub push did not deploy", "app", a.ID, "commit", ev.After, "err", err)
		}
	})
	return "deploying " + ev.After, nil
}

// deployPushed clones the pushed branch (with token, when set) and deploys its commit.
func (s *Service) deployPushed(a store.App, ev pushEvent, token string) (store.Deployment, error) {
	ctx, cancel := context.WithTimeout(s.bg.Ctx(), CloneTimeout)
	defer cancel()
	branch := strings.TrimPrefix(ev.Ref, "refs/heads/")
	dir, err := os.MkdirTemp("", "pandastack-clone-")
	if err != nil {
		return store.Deployment{}, err
	}
	defer os.RemoveAll(dir)
	env, err := cloneCredentials(ev.Repository.CloneURL, token)
	if err != nil {
		return store.Deployment{}, err
	}
	if _, err := gitEnv(ctx, env, "", "-c", "protocol.allow=never", "-c", "protocol.http.allow=always", "-c", "protocol.https.allow=always",
		"clone", "--quiet", "--bare", "--single-branch", "--branch", branch, "--", ev.Repository.CloneURL, dir); err != nil {
		return store.Deployment{}, err
	}
	archive, err := gitArchive(ctx, dir, ev.After)
	if err != nil {
		return store.Deployment{}, err
	}
	return s.Deploy(ctx, a.TeamID, a.ID, archive, Source{Kind: "git", Commit: ev.After, Branch: branch})
}

// cloneCredentials is git's environment that sends token to cloneURL (none without a token):
// an Authorization header from its configuration in the environment, never on the command line
// (process lists) nor in the URL (error messages); redirects are not followed, so the header
// goes to that host only, and only over https or to a loopback address.
func cloneCredentials(cloneURL, token string) ([]string, error) {
	if token == "" {
		return nil, nil
	}
	u, err := url.Parse(cloneURL)
	if err != nil {
		return nil, errdefs.Invalidf("the push's clone_url is not a URL")
	}
	if ip := net.ParseIP(u.Hostname()); u.Scheme != "https" && (ip == nil || !ip.IsLoopback()) && u.Hostname() != "localhost" {
		return nil, errdefs.Invalidf("the repository's token is only sent over https (the push's clone_url is %s)", u.Redacted())
	}
	basic := base64.StdEncoding.EncodeToString([]byte("x-access-token:" + token))
	return []string{"GIT_CONFIG_COUNT=2", "GIT_CONFIG_KEY_0=http.extraHeader", "GIT_CONFIG_VALUE_0=Authorization: Basic " + basic,
		"GIT_CONFIG_KEY_1=http.followRedirects", "GIT_CONFIG_VALUE_1=false", "GIT_TERMINAL_PROMPT=0"}, nil
}

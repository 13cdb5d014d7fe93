package apps

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"github.com/pandastack/pandastack/internal/bundle"
	"github.com/pandastack/pandastack/internal/errdefs"
	"github.com/pandastack/pandastack/internal/store"
)

// An app's git remote is a bare repository <GitDir>/<app id>.git, made at its first use, served by
// git-http-backend (internal/api). After a push the branch heads are compared: a new commit on
// the app's branch is deployed from `git archive` of it.

// GitBackend is Debian's git-http-backend (package git).
const GitBackend = "/usr/lib/git-core/git-http-backend"

// GitEnabled says whether apps have git remotes (a directory for them is configured).
func (s *Service) GitEnabled() bool { return s.cfg.GitDir != "" }

// GitRoot is the directory of the apps' bare repositories.
func (s *Service) GitRoot() string { return s.cfg.GitDir }

// Repo returns the team's app called name and its bare repository's directory name (under
// GitRoot), creating the repository on first use.
func (s *Service) Repo(ctx context.Context, teamID, name string) (store.App, string, error) {
	if !s.GitEnabled() {
		return store.App{}, "", errdefs.NotFoundf("this server has no git remotes (no --git-dir)")
	}
	a, err := s.cfg.Store.GetTeamApp(ctx, teamID, name)
	if err != nil || a.Name != name {
		return a, "", errdefs.NotFoundf("there is no app %s (a push to a deleted app has nowhere to go)", bundle.Trunc(name))
	}
	repo := a.ID + ".git"
	dir := filepath.Join(s.cfg.GitDir, repo)
	if _, err := os.Stat(filepath.Join(dir, "HEAD")); err == nil {
		return a, repo, nil
	}
	if err := os.MkdirAll(s.cfg.GitDir, 0o700); err != nil {
		return a, "", err
	}
	if _, err := git(ctx, "", "init", "--quiet", "--bare", "--initial-branch="+a.Branch, dir); err != nil {
		return a, "", err
	}
	// Receive-pack over HTTP (REMOTE_USER is set by the server after it checked the key).
	if _, err := git(ctx, dir, "config", "http.receivepack", "true"); err != nil {
		return a, "", err
	}
	return a, repo, nil
}

// Heads returns a repository's branch heads (refs/heads/x → commit).
func (s *Service) Heads(ctx context.Context, repo string) map[string]string {
	out, err := git(ctx, filepath.Join(s.cfg.GitDir, repo), "for-each-ref", "--format=%(refname) %(objectname)", "refs/heads/")
	heads := map[string]string{}
	if err != nil {
		return heads
	}
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		if ref, sha, ok := strings.Cut(line, " "); ok {
			heads[strings.TrimPrefix(ref, "refs/heads/")] = sha
		}
	}
	return heads
}

// Pushed deploys what a push moved: the app's branch (the app), any other branch (its preview
// at <app>--<branch>.apps.<domain>). It returns the deployments started.
func (s *Service) Pushed(ctx context.Context, a store.App, repo string, before map[string]string) ([]store.Deployment, error) {
	var out []store.Deployment
	var errs []error
	for branch, sha := range s.Heads(ctx, repo) {
		if before[branch] == sha {
			continue
		}
		archive, err := gitArchive(ctx, filepath.Join(s.cfg.GitDir, repo), sha)
		if err == nil {
			var d store.Deployment
			d, err = s.Deploy(ctx, a.TeamID, a.ID, archive, Source{Kind: "git", Commit: sha, Branch: branch})
			out = append(out, d)
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", branch, err))
		}
	}
	return out, errors.Join(errs...)
}

// gitArchive is commit's tree as a .tar.gz, refused past the bundle limit.
func gitArchive(ctx context.Context, dir, commit string) ([]byte, error) {
	cmd := exec.CommandContext(ctx, "git", "-C", dir, "archive", "--format=tar.gz", commit)
	var out, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &limited{w: &out, n: bundle.MaxBytes + 1}, &stderr
	err := cmd.Run()
	if out.Len() > bundle.MaxBytes {
		return nil, errdefs.New(errdefs.TooLarge, "commit %s archives to more than %d bytes (32 MiB)", commit[:min(12, len(commit))], bundle.MaxBytes)
	}
	if err != nil {
		return nil, fmt.Errorf("git archive %s: %v: %s", commit, err, strings.TrimSpace(stderr.String()))
	}
	return out.Bytes(), nil
}

// limited takes the first n bytes written to it and discards the rest (counting them in).
type limited struct {
	w *bytes.Buffer
	n int
}

func (l *limited) Write(p []byte) (int, error) {
	if room := l.n - l.w.Len(); room > 0 {
		l.w.Write(p[:min(room, len(p))])
	}
	return len(p), nil
}

func git(ctx context.Context, dir string, args ...string) (string, error) {
	return gitEnv(ctx, nil, dir, args...)
}

// gitEnv is git with env added to the server's environment.
func gitEnv(ctx context.Context, env []string, dir string, args ...string) (string, error) {
	if dir != "" {
		args = append([]string{"-C", dir}, args...)
	}
	cmd := exec.CommandContext(ctx, "git", args...)
	if env != nil {
		cmd.Env = append(os.Environ(), env...)
	}
	var out, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &stderr
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("git %s: %v: %s", strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
	return out.String(), nil
}

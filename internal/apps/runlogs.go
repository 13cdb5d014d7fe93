package apps

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"sync"

	"github.com/pandastack/pandastack/internal/errdefs"
	"github.com/pandastack/pandastack/internal/sandboxes"
	"github.com/pandastack/pandastack/internal/sealed"
)

// Logs writes the runtime output of the team's app's live instances to w, each line prefixed
// with its instance ("[sb_…] "): every instance is a restore of the release, so each has the
// app's process under the same pid. Without follow, one instance after the other; with follow,
// merged line by line as they come, until ctx ends or every instance's process does (instances
// that start later, e.g. replacements, are not joined). Secrets are redacted.
func (s *Service) Logs(ctx context.Context, teamID, id string, follow bool, w io.Writer, flush func()) error {
	a, err := s.Get(ctx, teamID, id)
	if err != nil {
		return err
	}
	if a.LiveDeploymentID == "" {
		return errdefs.Conflictf("app %s has no live deployment", a.Name)
	}
	d, err := s.cfg.Store.GetDeployment(ctx, a.ID, a.LiveDeploymentID)
	if err != nil {
		return err
	}
	var bodies []io.ReadCloser
	var labels []string
	defer func() {
		for _, b := range bodies {
			b.Close()
		}
	}()
	if d.Pid > 0 {
		for _, sbID := range s.instances(ctx, d, true).ids {
			sb, err := s.cfg.Store.GetSandbox(ctx, sbID)
			if err != nil || sandboxes.Usable(sb) != nil {
				continue
			}
			c, err := s.cfg.Sandboxes.Target(ctx, sb)
			if err != nil {
				continue
			}
			body, err := c.ProcessOutput(ctx, sb.ID, int(d.Pid), 0, follow)
			if err != nil {
				s.log.Warn("apps: an instance's output cannot be read", "app", a.ID, "sandbox", sb.ID, "err", err)
				continue
			}
			bodies, labels = append(bodies, body), append(labels, sb.ID)
		}
	}
	if len(bodies) == 0 {
		return errdefs.Conflictf("app %s has no running instance", a.Name)
	}
	secrets, _ := sealed.Open(s.cfg.SecretsKey, a.Secrets)
	out := &lineMux{w: &redactor{w: w, secrets: secretValues(secrets)}, flush: flush}
	if !follow {
		for i, b := range bodies {
			if err := out.copy(labels[i], b); err != nil {
				return err
			}
		}
		return nil
	}
	errs := make([]error, len(bodies))
	var wg sync.WaitGroup
	for i, b := range bodies {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = out.copy(labels[i], b)
		}()
	}
	wg.Wait()
	if ctx.Err() != nil {
		return nil // the reader went away
	}
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

// lineMux writes whole lines of several processes' output to w, one at a time, each prefixed
// with its source's label.
type lineMux struct {
	mu    sync.Mutex
	w     io.Writer
	flush func()
}

// copy writes the text of the NDJSON output events of body (copyOutput) to the mux, line by line
// under label; a last line without its newline ends with one.
func (m *lineMux) copy(label string, body io.Reader) error {
	lw := &labelled{m: m, prefix: []byte("[" + label + "] ")}
	err := copyOutput(lw, body, nil)
	if werr := lw.end(); err == nil {
		err = werr
	}
	return err
}

// labelled collects one source's text into lines for its mux.
type labelled struct {
	m       *lineMux
	prefix  []byte
	partial []byte
}

func (l *labelled) Write(p []byte) (int, error) {
	l.partial = append(l.partial, p...)
	i := bytes.LastIndexByte(l.partial, '\n')
	if i < 0 && len(l.partial) <= maxPartialLine {
		return len(p), nil
	}
	if i < 0 { // a line that never ends is cut
		return len(p), l.end()
	}
	lines := l.partial[:i+1]
	l.partial = bytes.Clone(l.partial[i+1:])
	return len(p), l.emit(lines)
}

// maxPartialLine bounds a line kept back waiting for its end.
const maxPartialLine = 64 << 10

// end writes what is left of a last line, with a newline.
func (l *labelled) end() error {
	if len(l.partial) == 0 {
		return nil
	}
	lines := append(l.partial, '\n')
	l.partial = nil
	return l.emit(lines)
}

// emit writes complete lines (ending in \n), each with the prefix, in one go, and flushes.
func (l *labelled) emit(lines []byte) error {
	var buf bytes.Buffer
	for len(lines) > 0 {
		i := bytes.IndexByte(lines, '\n')
		buf.Write(l.prefix)
		buf.Write(lines[:i+1])
		lines = lines[i+1:]
	}
	l.m.mu.Lock()
	defer l.m.mu.Unlock()
	if _, err := l.m.w.Write(buf.Bytes()); err != nil {
		return fmt.Errorf("writing the logs: %w", err)
	}
	if l.m.flush != nil {
		l.m.flush()
	}
	return nil
}

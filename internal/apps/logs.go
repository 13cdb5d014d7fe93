package apps

import (
	"context"
	"fmt"
	"io"
	"sort"
	"strings"
	"sync"
)

// Redacted replaces a secret's value in logs.
const Redacted = "[redacted]"

// logBuf is a deployment's build logs while it builds: appended to, followed by readers, the
// secrets' values replaced as they are written, the tail of MaxLogBytes kept.
type logBuf struct {
	mu      sync.Mutex
	data    []byte
	base    int64 // bytes dropped from the front
	done    bool
	changed chan struct{}
	secrets []string
	partial []byte // a line's start not yet scrubbed (a secret may span two writes)
}

func newLogBuf() *logBuf { return &logBuf{changed: make(chan struct{})} }

// secretValues are the values to redact, longest first (a value inside another is not left
// half-replaced); values shorter than 3 bytes would redact ordinary text and are left.
func secretValues(secrets map[string]string) []string {
	var out []string
	for _, v := range secrets {
		if len(v) >= 3 {
			out = append(out, v)
		}
	}
	sort.Slice(out, func(i, j int) bool { return len(out[i]) > len(out[j]) })
	return out
}

func (b *logBuf) redact(secrets map[string]string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.secrets = secretValues(secrets)
}

func scrub(secrets []string, s string) string {
	for _, v := range secrets {
		s = strings.ReplaceAll(s, v, Redacted)
	}
	return s
}

func (b *logBuf) scrub(s string) string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return scrub(b.secrets, s)
}

// Write appends p; whole lines are scrubbed and published, a partial line waits for its end
// (or for the buffer's end).
func (b *logBuf) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.partial = append(b.partial, p...)
	i := strings.LastIndexByte(string(b.partial), '\n')
	if i < 0 && len(b.partial) < 64<<10 {
		return len(p), nil
	}
	cut := i + 1
	if i < 0 {
		cut = len(b.partial)
	}
	b.publish(b.partial[:cut])
	b.partial = append([]byte(nil), b.partial[cut:]...)
	return len(p), nil
}

func (b *logBuf) publish(p []byte) {
	b.data = append(b.data, scrub(b.secrets, string(p))...)
	if over := len(b.data) - MaxLogBytes; over > 0 {
		b.data = append([]byte(nil), b.data[over:]...)
		b.base += int64(over)
	}
	close(b.changed)
	b.changed = make(chan struct{})
}

func (b *logBuf) WriteString(s string) { b.Write([]byte(s)) }

func (b *logBuf) Printf(format string, args ...any) { b.WriteString(fmt.Sprintf(format, args...)) }

// String is the logs so far (a pending partial line included).
func (b *logBuf) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return string(b.data) + scrub(b.secrets, string(b.partial))
}

// close marks the logs complete: followers end.
func (b *logBuf) close() {
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(b.partial) > 0 {
		b.publish(b.partial)
		b.partial = nil
	}
	if !b.done {
		b.done = true
		close(b.changed)
		b.changed = make(chan struct{})
	}
}

// follow writes the logs to w, and with more the rest as it comes until they are complete.
func (b *logBuf) follow(ctx context.Context, w io.Writer, more bool, flush func()) error {
	var pos int64
	for {
		b.mu.Lock()
		start := pos - b.base
		if start < 0 {
			start = 0
		}
		chunk := string(b.data[start:])
		pos = b.base + int64(len(b.data))
		done, changed := b.done, b.changed
		if !more || done {
			chunk += scrub(b.secrets, string(b.partial))
		}
		b.mu.Unlock()
		if chunk != "" {
			if _, err := io.WriteString(w, chunk); err != nil {
				return err
			}
			if flush != nil {
				flush()
			}
		}
		if !more || done {
			return nil
		}
		select {
		case <-ctx.Done():
			return nil
		case <-changed:
		}
	}
}

// redactor writes through to w with the secrets' values replaced (runtime logs; a value split
// across two writes may pass).
type redactor struct {
	w       io.Writer
	secrets []string
}

func (r *redactor) Write(p []byte) (int, error) {
	if _, err := io.WriteString(r.w, scrub(r.secrets, string(p))); err != nil {
		return 0, err
	}
	return len(p), nil
}

package api

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/pandastack/pandastack/internal/client"
	"github.com/pandastack/pandastack/internal/testenv"
	v1 "github.com/pandastack/pandastack/internal/wire/v1"
)

// TestE2EFileTree: directory watch and archives through the public API on a real microVM —
// the watch sees what a command in the guest does, a tree with symlinks survives an archive
// round trip (links as links), and an archive that would escape through a symlink is refused.
func TestE2EFileTree(t *testing.T) {
	ctx, _, c, sb := e2eSandbox(t, nil)
	sh := func(cmd string) string {
		t.Helper()
		r, err := c.Exec(ctx, sb.ID, client.ExecRequest{Cmd: cmd})
		if err != nil || r.ExitCode != 0 {
			t.Fatalf("%s: %+v %v", cmd, r, err)
		}
		return r.Stdout
	}
	sh("mkdir -p /home/user/w/old")

	// The watch: ready, then exec's changes, in order for each path.
	type want struct{ typ, path, from string }
	steps := []struct {
		cmd   string
		wants []want
	}{
		{"echo hi > /home/user/w/f", []want{{"create", "/home/user/w/f", ""}, {"write", "/home/user/w/f", ""}}},
		{"mkdir /home/user/w/new && echo x > /home/user/w/new/g", []want{{"create", "/home/user/w/new", ""}, {"create", "/home/user/w/new/g", ""}}},
		{"mv /home/user/w/f /home/user/w/old/f2", []want{{"rename", "/home/user/w/old/f2", "/home/user/w/f"}}},
		{"rm -r /home/user/w/new", []want{{"remove", "/home/user/w/new/g", ""}, {"remove", "/home/user/w/new", ""}}},
	}
	step, got := -1, 0
	var seen []string
	next := func() { // run the next step's command (from inside the stream's callback)
		step, got = step+1, 0
		if step < len(steps) {
			sh(steps[step].cmd)
		}
	}
	// A guard, not a measurement: a missing event fails the test instead of hanging it.
	wctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	defer cancel()
	err := c.WatchFiles(wctx, sb.ID, "/home/user/w", true, func(ev v1.WatchEvent) (bool, error) {
		seen = append(seen, ev.Type+" "+ev.Path)
		if ev.Type == "ready" {
			next()
			return false, nil
		}
		w := steps[step].wants[got]
		if ev.Type == w.typ && ev.Path == w.path && (w.from == "" || ev.From == w.from) {
			if got++; got == len(steps[step].wants) {
				next()
			}
		}
		return step == len(steps), nil
	})
	if err != nil || step != len(steps) {
		t.Fatalf("watch: %v; at step %d, saw %v", err, step, seen)
	}

	// An archive round trip of a tree with symlinks (one pointing out of it) and a mode.
	sh(`mkdir -p /home/user/src/sub && cd /home/user/src && printf hello > a.txt && printf deep > sub/b.sh &&
		chmod 0750 sub/b.sh && ln -s a.txt link && ln -s /etc/hostname out`)
	rc, err := c.DownloadArchive(ctx, sb.ID, "/home/user/src", true)
	if err != nil {
		t.Fatal(err)
	}
	data, err := io.ReadAll(rc)
	rc.Close()
	if err != nil {
		t.Fatal(err)
	}
	if g := strings.Join(testenv.TarEntries(t, bytes.NewReader(data)), " "); g != "a.txt link>a.txt out>/etc/hostname sub/ sub/b.sh" {
		t.Fatalf("archive entries: %s", g)
	}
	res, err := c.UploadArchive(ctx, sb.ID, "/home/user/copy", bytes.NewReader(data), int64(len(data)))
	if err != nil || res.Entries != 5 || res.Bytes != 9 {
		t.Fatalf("upload: %+v %v", res, err)
	}
	if out := sh(`cd /home/user/copy && cat a.txt sub/b.sh && echo && readlink link out && stat -c '%a %U' sub/b.sh && test -L out && echo link`); out != "hellodeep\na.txt\n/etc/hostname\n750 user\nlink\n" {
		t.Fatalf("unpacked tree:\n%s", out)
	}

	// Escapes: through a symlink in the archive, or one already there; `..`.
	var evil bytes.Buffer
	tw := tar.NewWriter(&evil)
	tw.WriteHeader(&tar.Header{Name: "up", Typeflag: tar.TypeSymlink, Linkname: "/tmp"})
	tw.WriteHeader(&tar.Header{Name: "up/escaped", Typeflag: tar.TypeReg, Mode: 0o644, Size: 1})
	tw.Write([]byte("x"))
	tw.Close()
	var dotdot bytes.Buffer
	tw = tar.NewWriter(&dotdot)
	tw.WriteHeader(&tar.Header{Name: "a/../../escaped", Typeflag: tar.TypeReg, Mode: 0o644, Size: 1})
	tw.Write([]byte("x"))
	tw.Close()
	for _, b := range [][]byte{evil.Bytes(), dotdot.Bytes()} {
		_, err = c.UploadArchive(ctx, sb.ID, "/home/user/copy", bytes.NewReader(b), int64(len(b)))
		var ae *client.APIError
		if !errors.As(err, &ae) || ae.Status != 400 {
			t.Fatalf("escaping archive: %v", err)
		}
	}
	if out := sh("ls /tmp/escaped /home/user/escaped 2>&1 || true"); !strings.Contains(out, "No such file") || strings.Count(out, "No such file") != 2 {
		t.Fatalf("an escaping entry was written: %s", out)
	}
}

package guest_test

import (
	"archive/tar"
	"bytes"
	"context"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/pandastack/pandastack/internal/guest"
	"github.com/pandastack/pandastack/internal/testenv"
)

// watchEvents runs a watch in the background; its events arrive on the returned channel (the
// first, ready, already read), closed when the watch ends.
func watchEvents(t *testing.T, c *guest.Client, dir, user string, recursive bool, block chan struct{}) <-chan guest.WatchEvent {
	t.Helper()
	ctx, cancel := context.WithCancel(tctx(t))
	t.Cleanup(cancel)
	evs := make(chan guest.WatchEvent, 1<<16)
	ready := make(chan error, 1)
	go func() {
		defer close(evs)
		first := true
		err := c.Watch(ctx, dir, user, recursive, func(ev guest.WatchEvent) error {
			if first {
				first = false
				if ev.Type != guest.WatchReady {
					t.Errorf("first event %+v, want ready", ev)
				}
				ready <- nil
				return nil
			}
			if block != nil {
				<-block
			}
			evs <- ev
			return nil
		})
		if first {
			ready <- err
		}
	}()
	if err := <-ready; err != nil {
		t.Fatalf("watch %s: %v", dir, err)
	}
	return evs
}

// waitEvent reads events until one has typ and path (and from, when given); it fails if the
// stream ends first.
func waitEvent(t *testing.T, evs <-chan guest.WatchEvent, typ, path, from string) guest.WatchEvent {
	t.Helper()
	var seen []string
	for ev := range evs {
		if ev.Type == typ && ev.Path == path && (from == "" || ev.From == from) {
			return ev
		}
		seen = append(seen, ev.String())
	}
	t.Fatalf("no %s event for %s (from %q); saw %v", typ, path, from, seen)
	return guest.WatchEvent{}
}

// TestWatch: a recursive watch tells creates, writes, renames and removes, also in a directory
// made after it started (and what was made in it before its own watch was in place).
func TestWatch(t *testing.T) {
	e := startAgent(t)
	c := connect(t, e)
	dir := filepath.Join(e.userHom, "w")
	if _, _, res := run(t, c, guest.ExecRequest{Cmd: "mkdir -p " + dir + "/old"}); res.ExitCode != 0 {
		t.Fatal(res)
	}
	evs := watchEvents(t, c, dir, "", true, nil)
	sh := func(cmd string) {
		t.Helper()
		if _, errs, res := run(t, c, guest.ExecRequest{Cmd: cmd, Cwd: dir}); res.ExitCode != 0 {
			t.Fatalf("%s: %s", cmd, errs)
		}
	}
	sh("echo hi > a")
	waitEvent(t, evs, "create", dir+"/a", "")
	waitEvent(t, evs, "write", dir+"/a", "")
	sh("echo x > old/in-old")
	waitEvent(t, evs, "create", dir+"/old/in-old", "")
	sh("mkdir -p new/deep && echo y > new/deep/f")
	if ev := waitEvent(t, evs, "create", dir+"/new", ""); !ev.Dir {
		t.Errorf("directory create without dir: %+v", ev)
	}
	waitEvent(t, evs, "create", dir+"/new/deep/f", "")
	sh("echo z >> new/deep/f")
	waitEvent(t, evs, "write", dir+"/new/deep/f", "")
	sh("mv a b")
	waitEvent(t, evs, "rename", dir+"/b", dir+"/a")
	sh("mv new renamed && echo w >> renamed/deep/f") // the watches follow a renamed directory
	waitEvent(t, evs, "rename", dir+"/renamed", dir+"/new")
	waitEvent(t, evs, "write", dir+"/renamed/deep/f", "")
	sh("mv b /tmp/pandastack-watch-out-$$ && rm /tmp/pandastack-watch-out-$$") // out of the tree: a remove
	waitEvent(t, evs, "remove", dir+"/b", "")
	sh("rm -r renamed")
	waitEvent(t, evs, "remove", dir+"/renamed/deep/f", "")
	waitEvent(t, evs, "remove", dir+"/renamed", "")

	// Not recursive: a subdirectory's own changes are not told.
	flat := watchEvents(t, c, dir, "", false, nil)
	sh("echo q > old/quiet && echo t > top")
	for ev := range flat {
		if strings.HasPrefix(ev.Path, dir+"/old/") {
			t.Fatalf("a flat watch told %+v", ev)
		}
		if ev.Path == dir+"/top" {
			break
		}
	}

	// Bad input.
	err := c.Watch(tctx(t), dir+"/old/in-old", "", false, func(guest.WatchEvent) error { return nil })
	wantCode(t, err, guest.CodeNotADirectory)
	err = c.Watch(tctx(t), dir+"/missing", "", false, func(guest.WatchEvent) error { return nil })
	wantCode(t, err, guest.CodeNotFound)
	err = c.Watch(tctx(t), "relative", "", false, func(guest.WatchEvent) error { return nil })
	wantCode(t, err, guest.CodeInvalidArgument)
}

// TestWatchOverflow: a reader that does not keep up loses events, and is told so by an
// overflow event; the watch goes on. The reader stops at the flood's first event; the flood is
// larger than everything that can hold its events meanwhile — the kernel's inotify queue, the
// agent's queue (guest.WatchQueue) and the stream's window to the host (1 MiB, guest.Client's
// yamux config; each event's frame is longer than its file's name) — so some are dropped
// whoever reads when (a starved agent leaves them in the kernel's queue: that one overflows).
func TestWatchOverflow(t *testing.T) {
	e := startAgent(t)
	c := connect(t, e)
	dir := filepath.Join(e.userHom, "flood")
	os.Mkdir(dir, 0o755)
	kernelQueue := 16384 // fs.inotify.max_queued_events' default
	if b, err := os.ReadFile("/proc/sys/fs/inotify/max_queued_events"); err == nil {
		if n, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil {
			kernelQueue = n
		}
	}
	if kernelQueue > 1<<17 {
		t.Skipf("fs.inotify.max_queued_events is %d here: a flood past it takes too long", kernelQueue)
	}
	const nameLen, window = 200, 1 << 20
	flood := kernelQueue + guest.WatchQueue + window/nameLen + 100
	name := func(i int) string {
		s := strconv.Itoa(i)
		return strings.Repeat("x", nameLen-len(s)) + s
	}
	block := make(chan struct{})
	evs := watchEvents(t, c, dir, "root", false, block)
	for i := range flood {
		f, err := os.Create(filepath.Join(dir, name(i)))
		if err != nil {
			t.Fatal(err)
		}
		f.Close()
	}
	close(block)
	told, overflow := 0, false
	after := filepath.Join(dir, "after")
	for ev := range evs {
		switch {
		case ev.Type == "overflow":
			if !overflow {
				os.WriteFile(after, nil, 0o644) // the watch goes on
			}
			overflow = true
		case ev.Type == "create" && ev.Path == after:
			if !overflow {
				t.Fatalf("%s told before any overflow event", after)
			}
			if told >= flood {
				t.Fatalf("all %d creates were told, none lost", flood)
			}
			t.Logf("%d of %d creates told, then an overflow event", told, flood)
			return
		case ev.Type == "create":
			told++
		}
	}
	t.Fatalf("the watch ended (overflow told: %v, %d creates told)", overflow, told)
}

// tarOf builds a tar of the given entries.
func tarOf(t *testing.T, hdrs ...*tar.Header) []byte {
	t.Helper()
	var b bytes.Buffer
	tw := tar.NewWriter(&b)
	for _, h := range hdrs {
		if h.Typeflag == tar.TypeReg && h.Mode == 0 {
			h.Mode = 0o644
		}
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		if h.Typeflag == tar.TypeReg {
			tw.Write(bytes.Repeat([]byte("x"), int(h.Size)))
		}
	}
	tw.Close()
	return b.Bytes()
}

// TestArchiveRoundTrip: a tree with a subdirectory, modes and symlinks (one pointing out of it)
// comes back the same, links as links.
func TestArchiveRoundTrip(t *testing.T) {
	e := startAgent(t)
	c := connect(t, e)
	src := filepath.Join(e.userHom, "src")
	if _, errs, res := run(t, c, guest.ExecRequest{Cwd: e.userHom, Cmd: `mkdir -p src/sub/empty && cd src && printf hello > a.txt &&
		printf deep > sub/b.txt && chmod 0755 sub/b.txt && ln -s a.txt link && ln -s /etc/passwd out && mkfifo fifo`}); res.ExitCode != 0 {
		t.Fatal(errs)
	}
	rc, err := c.ArchiveGet(tctx(t), src, "")
	if err != nil {
		t.Fatal(err)
	}
	data, err := io.ReadAll(rc)
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(testenv.TarEntries(t, bytes.NewReader(data)), " "); got != "a.txt link>a.txt out>/etc/passwd sub/ sub/b.txt sub/empty/" {
		t.Fatalf("archive entries: %s", got)
	}
	res, err := c.ArchivePut(tctx(t), filepath.Join(e.userHom, "dst/nested"), "", bytes.NewReader(data))
	if err != nil {
		t.Fatal(err)
	}
	if res.Entries != 6 || res.Bytes != 9 {
		t.Errorf("put answered %+v", res)
	}
	out, errs, r := run(t, c, guest.ExecRequest{Cwd: e.userHom + "/dst/nested", Cmd: `cat a.txt sub/b.txt; echo; readlink link out; stat -c '%a %u %n' sub/b.txt a.txt sub/empty`})
	if r.ExitCode != 0 {
		t.Fatal(errs)
	}
	want := "hellodeep\na.txt\n/etc/passwd\n755 4242 sub/b.txt\n644 4242 a.txt\n755 4242 sub/empty\n"
	if out != want {
		t.Fatalf("unpacked tree:\n%s\nwant\n%s", out, want)
	}
	_, err = c.ArchiveGet(tctx(t), src+"/a.txt", "")
	wantCode(t, err, guest.CodeNotADirectory)
}

// TestArchiveRefuses: names that leave the target, symlinks and hard links that would lead out
// of it, and what is not a tar are refused, and nothing outside the target changes. As root, so
// the confinement alone stops them.
func TestArchiveRefuses(t *testing.T) {
	e := startAgent(t)
	c := connect(t, e)
	base := worldDir(t)
	outside := filepath.Join(base, "outside")
	os.Mkdir(outside, 0o755)
	os.WriteFile(filepath.Join(outside, "secret"), []byte("keep"), 0o644)
	for i, tc := range []struct {
		what string
		tar  []byte
	}{
		{"dot-dot", tarOf(t, &tar.Header{Name: "../outside/secret", Typeflag: tar.TypeReg, Size: 1})},
		{"dot-dot inside", tarOf(t, &tar.Header{Name: "a/../../outside/x", Typeflag: tar.TypeReg, Size: 1})},
		{"absolute", tarOf(t, &tar.Header{Name: outside + "/secret", Typeflag: tar.TypeReg, Size: 1})},
		{"through a symlink", tarOf(t, &tar.Header{Name: "l", Typeflag: tar.TypeSymlink, Linkname: outside},
			&tar.Header{Name: "l/secret", Typeflag: tar.TypeReg, Size: 1})},
		{"through a relative symlink", tarOf(t, &tar.Header{Name: "up", Typeflag: tar.TypeSymlink, Linkname: "../outside"},
			&tar.Header{Name: "up/new", Typeflag: tar.TypeReg, Size: 1})},
		{"directory through a symlink", tarOf(t, &tar.Header{Name: "l", Typeflag: tar.TypeSymlink, Linkname: outside},
			&tar.Header{Name: "l/", Typeflag: tar.TypeDir, Mode: 0o777})},
		{"hard link out", tarOf(t, &tar.Header{Name: "h", Typeflag: tar.TypeLink, Linkname: "../outside/secret"})},
		{"hard link absolute", tarOf(t, &tar.Header{Name: "h", Typeflag: tar.TypeLink, Linkname: outside + "/secret"})},
		{"hard link through a symlink", tarOf(t, &tar.Header{Name: "l", Typeflag: tar.TypeSymlink, Linkname: outside},
			&tar.Header{Name: "h", Typeflag: tar.TypeLink, Linkname: "l/secret"})},
		{"device", tarOf(t, &tar.Header{Name: "dev", Typeflag: tar.TypeChar, Devmajor: 1, Devminor: 3})},
		{"not a tar", bytes.Repeat([]byte("not a tar "), 100)},
	} {
		target := filepath.Join(base, "t"+string(rune('a'+i)))
		_, err := c.ArchivePut(tctx(t), target, "root", bytes.NewReader(tc.tar))
		if guest.ErrorCode(err) != guest.CodeInvalidArgument {
			t.Errorf("%s: %v, want invalid_argument", tc.what, err)
		}
	}
	entries, _ := os.ReadDir(outside)
	if b, _ := os.ReadFile(filepath.Join(outside, "secret")); len(entries) != 1 || string(b) != "keep" || func() bool { fi, _ := os.Stat(outside); return fi.Mode().Perm() != 0o755 }() {
		t.Fatalf("outside changed: %d entries, secret %q", len(entries), b)
	}

	// A symlink already in the target is replaced by a file entry, never written through; a hard
	// link inside the archive works.
	target := filepath.Join(base, "existing")
	os.Mkdir(target, 0o755)
	os.Symlink(filepath.Join(outside, "secret"), filepath.Join(target, "s"))
	_, err := c.ArchivePut(tctx(t), target, "root", bytes.NewReader(tarOf(t,
		&tar.Header{Name: "s", Typeflag: tar.TypeReg, Size: 3},
		&tar.Header{Name: "h", Typeflag: tar.TypeLink, Linkname: "s"})))
	if err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(filepath.Join(outside, "secret")); string(b) != "keep" {
		t.Fatalf("wrote through a symlink: secret is %q", b)
	}
	if b, _ := os.ReadFile(filepath.Join(target, "h")); string(b) != "xxx" {
		t.Fatalf("hard link reads %q", b)
	}
	_, err = c.ArchivePut(tctx(t), "relative", "root", bytes.NewReader(nil))
	wantCode(t, err, guest.CodeInvalidArgument)
}

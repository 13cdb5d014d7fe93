package agenttest

import (
	"archive/tar"
	"bufio"
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"io"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/pandastack/pandastack/internal/testenv"
	"github.com/pandastack/pandastack/internal/wire/hostapi"
)

// filetree: a watch sees the file calls' changes (a write may arrive as a create, a write or,
// on the real agent, a rename from its hidden temp file), archives go both ways, and bad input
// is refused.
func (k *contract) filetree(t *testing.T) {
	id, dir := k.main.ID, "/tmp/contract-tree"
	if err := k.c.Mkdir(ctx(), id, dir+"/w"); err != nil {
		t.Fatal(err)
	}
	guard, cancel := context.WithTimeout(ctx(), 2*time.Minute)
	defer cancel()
	body := must[io.ReadCloser](t, "watch")(k.c.FilesAs("").Watch(guard, id, dir+"/w", true))
	defer body.Close()
	events := make(chan hostapi.WatchEvent, 1024)
	go func() {
		defer close(events)
		sc := bufio.NewScanner(body)
		for sc.Scan() {
			var ev hostapi.WatchEvent
			if json.Unmarshal(sc.Bytes(), &ev) == nil {
				events <- ev
			}
		}
	}()
	// want reads events until one of types for path arrives.
	want := func(path, from string, types ...string) {
		t.Helper()
		var seen []hostapi.WatchEvent
		for ev := range events {
			if ev.Path == path && slices.Contains(types, ev.Type) && (from == "" || ev.From == from) {
				return
			}
			seen = append(seen, ev)
		}
		t.Fatalf("no %v event for %s; saw %+v", types, path, seen)
	}
	want(dir+"/w", "", "ready")
	k.write(t, id, dir+"/w/a", "one")
	want(dir+"/w/a", "", "create", "write", "rename")
	if err := k.c.Mkdir(ctx(), id, dir+"/w/sub"); err != nil {
		t.Fatal(err)
	}
	want(dir+"/w/sub", "", "create")
	k.write(t, id, dir+"/w/sub/b", "two") // recursive: the new directory is watched
	want(dir+"/w/sub/b", "", "create", "write", "rename")
	if err := k.c.Move(ctx(), id, dir+"/w/a", dir+"/w/c"); err != nil {
		t.Fatal(err)
	}
	want(dir+"/w/c", dir+"/w/a", "rename")
	if err := k.c.Remove(ctx(), id, dir+"/w/c", false); err != nil {
		t.Fatal(err)
	}
	want(dir+"/w/c", "", "remove")
	cancel()

	_, err := k.c.FilesAs("").Watch(ctx(), id, dir+"/w/sub/b", false)
	wantErr(t, "watch of a file", err, 400, "invalid_request")
	_, err = k.c.FilesAs("").Watch(ctx(), id, dir+"/nope", false)
	wantErr(t, "watch of a missing directory", err, 404, "not_found")

	// Archives: a tree out, the same tree (gzipped) into another directory.
	rc := must[io.ReadCloser](t, "archive get")(k.c.FilesAs("").ArchiveGet(ctx(), id, dir+"/w", "tar"))
	data, err := io.ReadAll(rc)
	rc.Close()
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(testenv.TarEntries(t, bytes.NewReader(data)), " "); got != "sub/ sub/b" {
		t.Errorf("archive of %s/w: %s", dir, got)
	}
	var gz bytes.Buffer
	zw := gzip.NewWriter(&gz)
	zw.Write(data)
	zw.Close()
	res := must[hostapi.ArchiveResult](t, "archive put")(k.c.FilesAs("").ArchivePut(ctx(), id, dir+"/copy", &gz, int64(gz.Len())))
	if res.Entries != 2 || res.Bytes != 3 {
		t.Errorf("archive put answered %+v", res)
	}
	k.wantFile(t, id, dir+"/copy/sub/b", "two")

	var evil bytes.Buffer
	tw := tar.NewWriter(&evil)
	tw.WriteHeader(&tar.Header{Name: "../evil", Typeflag: tar.TypeReg, Mode: 0o644, Size: 1})
	tw.Write([]byte("x"))
	tw.Close()
	_, err = k.c.FilesAs("").ArchivePut(ctx(), id, dir+"/copy", &evil, int64(evil.Len()))
	wantErr(t, "archive entry with ..", err, 400, "invalid_request")
	_, err = k.c.FilesAs("").ArchivePut(ctx(), id, dir+"/copy", strings.NewReader("not a tar at all, not at all"), 28)
	wantErr(t, "archive that is no tar", err, 400, "invalid_request")
	_, err = k.c.FilesAs("").ArchiveGet(ctx(), id, dir+"/copy/sub/b", "")
	wantErr(t, "archive of a file", err, 400, "invalid_request")
	_, err = k.c.FilesAs("").ArchiveGet(ctx(), id, dir+"/nope", "")
	wantErr(t, "archive of a missing directory", err, 404, "not_found")
	_, err = k.c.FilesAs("").ArchiveGet(ctx(), id, dir+"/copy", "zip")
	wantErr(t, "archive format zip", err, 400, "invalid_request")
	if err := k.c.Remove(ctx(), id, dir, true); err != nil {
		t.Errorf("remove -r: %v", err)
	}
}

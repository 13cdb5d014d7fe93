package image

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestKernelPackageMemo: the metapackage's resolution is kept with the apt lists' signature; a
// kept answer for the lists as they are is used without asking apt, one for other lists is not.
func TestKernelPackageMemo(t *testing.T) {
	sig := aptListsSignature()
	if sig == "" {
		t.Fatalf("cannot read %s: run apt-get update (make setup does)", aptListsDir)
	}
	b := &Builder{CacheDir: t.TempDir()}
	memo := filepath.Join(b.CacheDir, "kernel-package")
	// A marker no apt knows: only the memo can answer it.
	os.WriteFile(memo, []byte(sig+"\nlinux-image-from-the-memo\n"), 0o644)
	if pkg, err := b.resolveKernelPackage(context.Background()); err != nil || pkg != "linux-image-from-the-memo" {
		t.Fatalf("with a memo for these lists: %q, %v; want the memo's answer", pkg, err)
	}
	os.WriteFile(memo, []byte("other-lists\nlinux-image-from-the-memo\n"), 0o644)
	pkg, err := b.resolveKernelPackage(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if pkg == "linux-image-from-the-memo" || !strings.HasPrefix(pkg, "linux-image-") {
		t.Fatalf("with a memo for other lists: %q; want apt's answer", pkg)
	}
	data, _ := os.ReadFile(memo)
	if string(data) != sig+"\n"+pkg+"\n" {
		t.Fatalf("memo after asking apt: %q", data)
	}
}

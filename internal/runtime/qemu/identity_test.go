package qemu

import "testing"

func TestParseVersion(t *testing.T) {
	v, err := parseVersion("QEMU emulator version 7.2.22 (Debian 1:7.2+dfsg-7+deb12u18+b3)\nCopyright (c) 2003-2022 Fabrice Bellard and the QEMU Project developers\n")
	if err != nil || v != "7.2.22 (Debian 1:7.2+dfsg-7+deb12u18+b3)" {
		t.Fatalf("got %q, %v", v, err)
	}
	if _, err := parseVersion("something else\n"); err == nil {
		t.Fatal("an unreadable version must be an error, not an empty identity")
	}
}

package termtext

import (
	"encoding/json"
	"testing"
)

func TestEscape(t *testing.T) {
	for in, want := range map[string]string{
		"plain, ünïcode ✓ 😀":        "plain, ünïcode ✓ 😀",
		"a\x00b":                    `a\x00b`,
		"\x1b[2J\x1b]0;pwned\x07":   `\x1b[2J\x1b]0;pwned\x07`,
		"line\nbreak\rcr\ttab\x7f":  `line\x0abreak\x0dcr\x09tab\x7f`,
		"csi\u009b31m":              `csi\u009b31m`,
		"evil\u202etxt.exe\u2066x":  `evil\u202etxt.exe\u2066x`,
		"sep\u2028par\u2029":        `sep\u2028par\u2029`,
		"bad\xffutf8":               `bad\xffutf8`,
		"zero\u200dwidth joiner ok": "zero\u200dwidth joiner ok",
	} {
		if got := Escape(in); got != want {
			t.Errorf("Escape(%q) = %q, want %q", in, got, want)
		}
		if HasUnsafe(in) != (in != want) {
			t.Errorf("HasUnsafe(%q) = %v", in, HasUnsafe(in))
		}
	}
}

func TestEscapeJSON(t *testing.T) {
	v := map[string]string{"k": "a\u009b\u202e\x7f\x1b\nb"}
	raw, _ := json.MarshalIndent(v, "", "  ")
	out := EscapeJSON(string(raw))
	for _, r := range out {
		if r != '\n' && Unsafe(r) {
			t.Fatalf("EscapeJSON left %q in %q", r, out)
		}
	}
	var back map[string]string
	if err := json.Unmarshal([]byte(out), &back); err != nil || back["k"] != v["k"] {
		t.Fatalf("EscapeJSON(%s) = %s: decodes to %q, %v", raw, out, back["k"], err)
	}
}

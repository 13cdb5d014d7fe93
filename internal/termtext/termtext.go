// Package termtext decides which characters of a user-supplied string may reach a terminal raw:
// control characters (C0, DEL, C1 such as the 8-bit CSI), bidirectional overrides and line or
// paragraph separators can rewrite or reorder what an operator sees, so the API refuses them in
// names and metadata and the CLI escapes them on output.
package termtext

import (
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"
)

// Unsafe reports whether r must not be printed raw.
func Unsafe(r rune) bool {
	return unicode.IsControl(r) || unicode.Is(unicode.Bidi_Control, r) || r == '\u2028' || r == '\u2029'
}

// HasUnsafe reports whether s holds an unsafe character or is not valid UTF-8.
func HasUnsafe(s string) bool {
	return !utf8.ValidString(s) || strings.IndexFunc(s, Unsafe) >= 0
}

// Escape returns s with every unsafe character and every invalid byte written as a Go-style
// escape (\x1b, \u202e), everything else unchanged.
func Escape(s string) string {
	if !HasUnsafe(s) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); {
		r, n := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && n == 1:
			fmt.Fprintf(&b, `\x%02x`, s[i])
		case Unsafe(r) && r < 0x80:
			fmt.Fprintf(&b, `\x%02x`, r)
		case Unsafe(r):
			fmt.Fprintf(&b, `\u%04x`, r)
		default:
			b.WriteString(s[i : i+n])
		}
		i += n
	}
	return b.String()
}

// EscapeJSON is Escape for encoded JSON: unsafe characters other than the layout's newlines
// (inside strings an encoder has already escaped C0 controls) become \uXXXX escapes, so the
// text still decodes to the same values.
func EscapeJSON(s string) string {
	unsafe := func(r rune) bool { return r != '\n' && Unsafe(r) }
	if strings.IndexFunc(s, unsafe) < 0 {
		return s
	}
	var b strings.Builder
	for _, r := range s {
		if unsafe(r) {
			fmt.Fprintf(&b, `\u%04x`, r)
		} else {
			b.WriteRune(r)
		}
	}
	return b.String()
}

package sealed

import (
	"regexp"
	"slices"
	"strings"

	"github.com/pandastack/pandastack/internal/errdefs"
)

// Limits of an env or secrets map (functions, apps).
const (
	MaxVars     = 64
	MaxVarValue = 4096
)

var varName = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]{0,63}$`)

// CheckVars checks an env or secrets map (what names it in errors): at most MaxVars shell
// variable names, not PANDASTACK_… nor one of reserved, values of at most MaxVarValue bytes
// without NUL; and that env and secrets share no name. Problems are errdefs.Invalid.
func CheckVars(env, secrets map[string]string, reserved ...string) error {
	not := "not PANDASTACK_…"
	if len(reserved) > 0 {
		not = "not " + strings.Join(reserved, ", ") + ", not PANDASTACK_…"
	}
	for _, v := range []struct {
		what string
		m    map[string]string
	}{{"env", env}, {"secrets", secrets}} {
		if len(v.m) > MaxVars {
			return errdefs.Invalidf("%s has %d entries; at most %d are allowed", v.what, len(v.m), MaxVars)
		}
		for k, val := range v.m {
			if !varName.MatchString(k) || strings.HasPrefix(k, "PANDASTACK_") || slices.Contains(reserved, k) {
				if len(k) > 60 {
					k = k[:60] + "…"
				}
				return errdefs.Invalidf("%s name %q must be a shell variable name (%s)", v.what, k, not)
			}
			if len(val) > MaxVarValue || strings.ContainsRune(val, 0) {
				return errdefs.Invalidf("%s %s: a value is at most %d bytes, without NUL", v.what, k, MaxVarValue)
			}
		}
	}
	for k := range secrets {
		if _, ok := env[k]; ok {
			return errdefs.Invalidf("%s is both in env and in secrets", k)
		}
	}
	return nil
}

package functions

import (
	"strings"

	"github.com/pandastack/pandastack/internal/bundle"
	"github.com/pandastack/pandastack/internal/errdefs"
)

// handlerFiles are the files that can hold a handler's module, first match wins.
func handlerFiles(runtime, handler string) []string {
	mod, _, _ := strings.Cut(handler, ".")
	if i := strings.LastIndex(handler, "."); i > 0 {
		mod = handler[:i]
	}
	switch runtime {
	case "python3":
		p := strings.ReplaceAll(mod, ".", "/")
		return []string{p + ".py", p + "/__init__.py"}
	default:
		return []string{mod + ".mjs", mod + ".js", mod + ".cjs"}
	}
}

// checkHandler says which file of the bundle holds the handler's module, or an error naming the
// files it looked for.
func checkHandler(files []bundle.File, runtime, handler string) error {
	want := handlerFiles(runtime, handler)
	for _, f := range files {
		for _, w := range want {
			if !f.Dir && f.Name == w {
				return nil
			}
		}
	}
	return errdefs.Invalidf("handler %q needs %s at the top level of the bundle; it has none", handler, strings.Join(want, " or "))
}

// trunc shortens user-supplied text quoted in a message.
var trunc = bundle.Trunc

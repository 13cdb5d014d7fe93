// Package detect reads an app's source tree and says how to build and start it: the framework
// (next, vite, cra, node, static, python), the package manager (npm, pnpm, yarn, bun: from
// package.json's packageManager, else the lockfile), the install, build and start commands and
// the port. Every field can be overridden; a tree it does not recognise gets a plan that says
// what it found and what to set. It reads files only: nothing runs.
package detect

import (
	"encoding/json"
	"fmt"
	"path"
	"regexp"
	"slices"
	"strings"

	v1 "github.com/pandastack/pandastack/internal/wire/v1"
)

// DefaultPort is the port an app listens on ($PORT) unless its build says otherwise.
const DefaultPort = 8080

// Frameworks are the known frameworks.
var Frameworks = []string{"next", "vite", "cra", "node", "static", "python"}

// Files is a source tree: the regular files' contents by clean relative path.
type Files map[string][]byte

type packageJSON struct {
	PackageManager  string            `json:"packageManager"`
	Main            string            `json:"main"`
	Scripts         map[string]string `json:"scripts"`
	Dependencies    map[string]string `json:"dependencies"`
	DevDependencies map[string]string `json:"devDependencies"`
}

func (p packageJSON) has(dep string) bool {
	_, a := p.Dependencies[dep]
	_, b := p.DevDependencies[dep]
	return a || b
}

// pm is a package manager's commands.
type pm struct{ install, frozen, run string }

var managers = map[string]pm{
	"npm":  {"npm install", "npm ci", "npm run"},
	"pnpm": {"npx --yes pnpm install", "npx --yes pnpm install --frozen-lockfile", "npx --yes pnpm run"},
	"yarn": {"npx --yes yarn install", "npx --yes yarn install --frozen-lockfile", "npx --yes yarn run"},
	"bun":  {"bun install", "bun install --frozen-lockfile", "bun run"},
}

var lockfiles = []struct{ file, pm string }{
	{"pnpm-lock.yaml", "pnpm"}, {"yarn.lock", "yarn"}, {"bun.lock", "bun"}, {"bun.lockb", "bun"}, {"package-lock.json", "npm"},
}

// plainNode is a start script that only runs node on a file: run directly, not through npm.
var plainNode = regexp.MustCompile(`^node [A-Za-z0-9_./-]+$`)

// staticServe serves dir on $PORT (Python's standard library is in every build image).
func staticServe(dir string) string {
	return "python3 -m http.server $PORT --bind 0.0.0.0 --directory " + dir
}

// Detect returns the plan for files with o's fields in place of the detected ones.
func Detect(files Files, o v1.AppBuild) v1.AppPlan {
	p := v1.AppPlan{Found: []string{}}
	for _, name := range []string{"package.json", "index.html", "requirements.txt", "pyproject.toml", "Procfile", "app.py", "main.py"} {
		if _, ok := files[name]; ok {
			p.Found = append(p.Found, name)
		}
	}
	var pkg packageJSON
	pkgBytes, hasPkg := files["package.json"]
	if hasPkg {
		if err := json.Unmarshal(pkgBytes, &pkg); err != nil {
			p.Problem = fmt.Sprintf("package.json is not valid JSON: %v", err)
			return override(p, o)
		}
		detectNode(files, pkg, &p)
	}
	switch {
	case p.Framework != "":
	case o.Framework == "static" || !hasPkg && has(files, "index.html"):
		p.Framework, p.Start = "static", staticServe(".")
	case o.Framework == "python" || !hasPkg && hasAny(files, "requirements.txt", "pyproject.toml", "Procfile", "app.py", "main.py"):
		detectPython(files, &p)
	}
	if o.Framework != "" && o.Framework != p.Framework && p.Framework != "" && hasPkg {
		// A node framework named by the user: redo its commands for it.
		p.Framework = o.Framework
		nodeCommands(files, pkg, &p)
	}
	p = override(p, o)
	if p.Start == "" {
		what := "nothing it recognises"
		if len(p.Found) > 0 {
			what = strings.Join(p.Found, ", ")
		}
		p.Problem = "no framework detected (found " + what + "): set build.start (and build.install, build.build, build.port as needed), " +
			"or add a package.json, an index.html, or a requirements.txt/app.py"
	}
	return p
}

func override(p v1.AppPlan, o v1.AppBuild) v1.AppPlan {
	if o.Framework != "" {
		p.Framework = o.Framework
	}
	for _, f := range []struct {
		dst *string
		src string
	}{{&p.Install, o.Install}, {&p.Build, o.Build}, {&p.Start, o.Start}} {
		if f.src != "" {
			*f.dst = f.src
		}
	}
	if o.Port != 0 {
		p.Port = o.Port
	}
	if p.Port == 0 {
		p.Port = DefaultPort
	}
	if p.Start != "" && p.Framework == "" {
		p.Framework = "custom"
	}
	return p
}

func detectNode(files Files, pkg packageJSON, p *v1.AppPlan) {
	switch {
	case pkg.has("next"):
		p.Framework = "next"
	case pkg.has("vite"):
		p.Framework = "vite"
	case pkg.has("react-scripts"):
		p.Framework = "cra"
	default:
		p.Framework = "node"
	}
	nodeCommands(files, pkg, p)
}

// nodeCommands fills the package manager and the commands of p.Framework.
func nodeCommands(files Files, pkg packageJSON, p *v1.AppPlan) {
	name, lock := "npm", ""
	for _, l := range lockfiles {
		if has(files, l.file) {
			name, lock = l.pm, l.file
			p.Found = append(p.Found, l.file)
			break
		}
	}
	if pkg.PackageManager != "" {
		n, _, _ := strings.Cut(pkg.PackageManager, "@")
		if _, ok := managers[n]; ok {
			name = n
		}
	}
	m := managers[name]
	p.PackageManager = name
	p.Install = ""
	if len(pkg.Dependencies)+len(pkg.DevDependencies) > 0 {
		p.Install = m.install
		if lock != "" && lockOwner(lock) == name {
			p.Install = m.frozen
		}
	}
	run := func(script string) string { return m.run + " " + script }
	p.Build = ""
	if _, ok := pkg.Scripts["build"]; ok {
		p.Build = run("build")
	}
	switch p.Framework {
	case "next":
		if p.Build == "" {
			p.Build = "./node_modules/.bin/next build"
		}
		p.Start = "./node_modules/.bin/next start -p $PORT"
	case "vite":
		if p.Build == "" {
			p.Build = "./node_modules/.bin/vite build"
		}
		p.Start = staticServe("dist")
	case "cra":
		if p.Build == "" {
			p.Build = "./node_modules/.bin/react-scripts build"
		}
		p.Start = staticServe("build")
	case "static":
		p.Start = staticServe(".")
	default:
		switch {
		case plainNode.MatchString(pkg.Scripts["start"]):
			p.Start = pkg.Scripts["start"] // npm's own start-up (seconds under emulation) left out
		case pkg.Scripts["start"] != "":
			p.Start = run("start")
		case pkg.Main != "" && has(files, path.Clean(pkg.Main)):
			p.Start = "node " + path.Clean(pkg.Main)
		default:
			for _, f := range []string{"server.js", "index.js", "app.js", "server.mjs", "index.mjs"} {
				if has(files, f) {
					p.Start = "node " + f
					break
				}
			}
		}
	}
}

func lockOwner(lock string) string {
	for _, l := range lockfiles {
		if l.file == lock {
			return l.pm
		}
	}
	return ""
}

func detectPython(files Files, p *v1.AppPlan) {
	p.Framework = "python"
	py := "python3"
	switch {
	case has(files, "requirements.txt"):
		p.Install = pythonRequirements
		py = ".venv/bin/python"
	case has(files, "pyproject.toml"):
		p.Install = "python3 -m venv .venv && .venv/bin/pip install ."
		py = ".venv/bin/python"
	}
	if web := procfileWeb(files["Procfile"]); web != "" {
		p.Start = web
		if py != "python3" {
			p.Start = "PATH=$PWD/.venv/bin:$PATH " + web
		}
		return
	}
	for _, f := range []string{"app.py", "main.py", "server.py"} {
		if has(files, f) {
			p.Start = py + " " + f
			return
		}
	}
}

// procfileWeb is the command of a Procfile's web: line.
func procfileWeb(b []byte) string {
	for _, line := range strings.Split(string(b), "\n") {
		if cmd, ok := strings.CutPrefix(strings.TrimSpace(line), "web:"); ok {
			return strings.TrimSpace(cmd)
		}
	}
	return ""
}

func has(files Files, name string) bool {
	_, ok := files[name]
	return ok
}

func hasAny(files Files, names ...string) bool {
	return slices.ContainsFunc(names, func(n string) bool { return has(files, n) })
}

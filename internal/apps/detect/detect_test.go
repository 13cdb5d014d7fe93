package detect

import (
	"strings"
	"testing"

	v1 "github.com/pandastack/pandastack/internal/wire/v1"
)

func TestDetect(t *testing.T) {
	cases := []struct {
		name  string
		files map[string]string
		o     v1.AppBuild
		want  v1.AppPlan
	}{
		{"vite with pnpm lockfile", map[string]string{
			"package.json":   `{"scripts": {"build": "vite build"}, "devDependencies": {"vite": "^5"}}`,
			"pnpm-lock.yaml": "lockfileVersion: 9"},
			v1.AppBuild{}, v1.AppPlan{Framework: "vite", PackageManager: "pnpm", Install: "npx --yes pnpm install --frozen-lockfile",
				Build: "npx --yes pnpm run build", Start: staticServe("dist"), Port: 8080}},
		{"cra with yarn", map[string]string{
			"package.json": `{"dependencies": {"react": "18", "react-scripts": "5"}, "scripts": {"build": "react-scripts build"}}`,
			"yarn.lock":    ""},
			v1.AppBuild{}, v1.AppPlan{Framework: "cra", PackageManager: "yarn", Install: "npx --yes yarn install --frozen-lockfile",
				Build: "npx --yes yarn run build", Start: staticServe("build"), Port: 8080}},
		{"next with packageManager bun over a package-lock", map[string]string{
			"package.json":      `{"packageManager": "bun@1.1.0", "dependencies": {"next": "15", "react": "19"}}`,
			"package-lock.json": "{}"},
			v1.AppBuild{}, v1.AppPlan{Framework: "next", PackageManager: "bun", Install: "bun install",
				Build: "./node_modules/.bin/next build", Start: "./node_modules/.bin/next start -p $PORT", Port: 8080}},
		{"next with bun lockfile", map[string]string{
			"package.json": `{"dependencies": {"next": "15"}, "scripts": {"build": "next build"}}`, "bun.lockb": ""},
			v1.AppBuild{}, v1.AppPlan{Framework: "next", PackageManager: "bun", Install: "bun install --frozen-lockfile",
				Build: "bun run build", Start: "./node_modules/.bin/next start -p $PORT", Port: 8080}},
		{"plain node without dependencies", map[string]string{
			"package.json": `{"name": "x", "scripts": {"start": "node server.js"}}`, "server.js": ""},
			v1.AppBuild{}, v1.AppPlan{Framework: "node", PackageManager: "npm", Start: "node server.js", Port: 8080}},
		{"node start script through npm", map[string]string{"package.json": `{"scripts": {"start": "NODE_ENV=production node server.js"}}`},
			v1.AppBuild{}, v1.AppPlan{Framework: "node", PackageManager: "npm", Start: "npm run start", Port: 8080}},
		{"node by main", map[string]string{"package.json": `{"main": "./srv.js", "dependencies": {"ws": "8"}}`, "srv.js": "",
			"package-lock.json": "{}"},
			v1.AppBuild{Port: 3000}, v1.AppPlan{Framework: "node", PackageManager: "npm", Install: "npm ci", Start: "node srv.js", Port: 3000}},
		{"static site", map[string]string{"index.html": "<h1>hi</h1>", "style.css": ""},
			v1.AppBuild{}, v1.AppPlan{Framework: "static", Start: staticServe("."), Port: 8080}},
		{"python with requirements", map[string]string{"requirements.txt": "flask\n", "app.py": ""},
			v1.AppBuild{}, v1.AppPlan{Framework: "python", Install: "python3 -m venv .venv && .venv/bin/pip install -r requirements.txt",
				Start: ".venv/bin/python app.py", Port: 8080}},
		{"python standard library", map[string]string{"main.py": ""},
			v1.AppBuild{}, v1.AppPlan{Framework: "python", Start: "python3 main.py", Port: 8080}},
		{"python Procfile", map[string]string{"Procfile": "web: gunicorn app:app -b 0.0.0.0:$PORT\n", "requirements.txt": ""},
			v1.AppBuild{}, v1.AppPlan{Framework: "python", Install: "python3 -m venv .venv && .venv/bin/pip install -r requirements.txt",
				Start: "PATH=$PWD/.venv/bin:$PATH gunicorn app:app -b 0.0.0.0:$PORT", Port: 8080}},
		{"overrides win", map[string]string{"package.json": `{"dependencies": {"vite": "5"}}`},
			v1.AppBuild{Install: "true", Build: "make", Start: "./run", Port: 9000},
			v1.AppPlan{Framework: "vite", PackageManager: "npm", Install: "true", Build: "make", Start: "./run", Port: 9000}},
		{"unknown with a start is custom", map[string]string{"Makefile": ""}, v1.AppBuild{Start: "./serve"},
			v1.AppPlan{Framework: "custom", Start: "./serve", Port: 8080}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			files := Files{}
			for k, v := range c.files {
				files[k] = []byte(v)
			}
			got := Detect(files, c.o)
			got.Found = nil
			if !equal(got, c.want) {
				t.Fatalf("plan\n got %+v\nwant %+v", got, c.want)
			}
		})
	}
}

func equal(a, b v1.AppPlan) bool {
	a.Found, b.Found = nil, nil
	return a.Framework == b.Framework && a.PackageManager == b.PackageManager && a.Install == b.Install && a.Build == b.Build &&
		a.Start == b.Start && a.Port == b.Port && a.Problem == b.Problem
}

// TestUnknownSaysWhatToSet: a tree with nothing recognisable gets a plan naming what was found
// and the fields to set.
func TestUnknownSaysWhatToSet(t *testing.T) {
	p := Detect(Files{"Cargo.toml": nil, "Procfile": []byte("worker: x\n")}, v1.AppBuild{})
	if p.Framework != "" && p.Framework != "python" || p.Start != "" || !strings.Contains(p.Problem, "set build.start") ||
		!strings.Contains(p.Problem, "Procfile") {
		t.Fatalf("plan %+v", p)
	}
	p = Detect(Files{"package.json": []byte("{nope")}, v1.AppBuild{})
	if !strings.Contains(p.Problem, "package.json is not valid JSON") {
		t.Fatalf("plan %+v", p)
	}
	p = Detect(Files{"package.json": []byte(`{"name": "lib"}`)}, v1.AppBuild{})
	if p.Start != "" || !strings.Contains(p.Problem, "found package.json") {
		t.Fatalf("plan %+v", p)
	}
}

// TestDepsKey: the key changes with what the install reads (and only that, for the installs
// detect writes); an install that reads the whole tree keys on the whole tree.
func TestDepsKey(t *testing.T) {
	base := Files{"package.json": []byte(`{"dependencies": {"left-pad": "1"}}`), "package-lock.json": []byte("{}"), "server.js": []byte("v1")}
	with := func(name, data string) Files {
		f := Files{}
		for k, v := range base {
			f[k] = v
		}
		f[name] = []byte(data)
		return f
	}
	key := DepsKey(base, "npm ci", nil)
	same := []struct {
		what  string
		files Files
	}{{"a source change", with("server.js", "v2")}, {"a new source file", with("lib.js", "x")}}
	for _, c := range same {
		if DepsKey(c.files, "npm ci", nil) != key {
			t.Errorf("%s changed the key of npm ci", c.what)
		}
	}
	differ := []struct {
		what     string
		files    Files
		install  string
		env      map[string]string
		reusable bool
	}{
		{"the lockfile", with("package-lock.json", `{"lockfileVersion": 3}`), "npm ci", nil, true},
		{"package.json", with("package.json", `{"dependencies": {"left-pad": "2"}}`), "npm ci", nil, true},
		{".npmrc", with(".npmrc", "registry=https://registry.example.invalid/"), "npm ci", nil, true},
		{"the install command", base, "npm install", nil, true},
		{"an env value", base, "npm ci", map[string]string{"NODE_ENV": "production"}, true},
		// Keyed on every file: a source change changes it.
		{"a custom install", with("server.js", "v2"), "make deps", nil, false},
		{"a workspace dependency", with("package.json", `{"dependencies": {"lib": "workspace:*"}}`), "npm ci", nil, false},
		{"a file: dependency outside", with("package.json", `{"dependencies": {"lib": "file:../lib"}}`), "npm ci", nil, false},
	}
	for _, c := range differ {
		k := DepsKey(c.files, c.install, c.env)
		if k == key {
			t.Errorf("%s did not change the key", c.what)
		}
		c.files["server.js"] = []byte("v3")
		if again := DepsKey(c.files, c.install, c.env); (again == k) != c.reusable {
			t.Errorf("%s: a source change kept the key: %v, want %v", c.what, again == k, c.reusable)
		}
	}
	// A file: dependency inside the tree: its files are in the key, the others not.
	local := with("package.json", `{"dependencies": {"greet": "file:vendor/greet"}}`)
	local["vendor/greet/index.js"] = []byte("v1")
	localKey := DepsKey(local, "npm ci", nil)
	if local["server.js"] = []byte("v9"); DepsKey(local, "npm ci", nil) != localKey {
		t.Error("a source change outside the file: dependency changed the key")
	}
	if local["vendor/greet/index.js"] = []byte("v2"); DepsKey(local, "npm ci", nil) == localKey {
		t.Error("a change of the file: dependency kept the key")
	}
	py := Files{"requirements.txt": []byte("flask==3.0\n"), "app.py": []byte("v1")}
	pyKey := DepsKey(py, pythonRequirements, nil)
	py["app.py"] = []byte("v2")
	if DepsKey(py, pythonRequirements, nil) != pyKey {
		t.Error("a source change changed the key of pip install -r requirements.txt")
	}
	py["requirements.txt"] = []byte("-e ./mylib\n")
	pyLocal := DepsKey(py, pythonRequirements, nil)
	py["app.py"] = []byte("v3")
	if DepsKey(py, pythonRequirements, nil) == pyLocal {
		t.Error("requirements naming a local path: a source change kept the key")
	}
}

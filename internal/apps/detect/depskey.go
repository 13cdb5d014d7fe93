package detect

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"maps"
	"path"
	"slices"
	"strings"
)

// pythonRequirements is the install detect writes for a requirements.txt.
const pythonRequirements = "python3 -m venv .venv && .venv/bin/pip install -r requirements.txt"

// manifests are the files the installs detect writes read (besides the package managers' own
// configuration elsewhere in the VM, which a release carries over).
var manifests = []string{"package.json", "package-lock.json", "npm-shrinkwrap.json", "yarn.lock", ".yarnrc", ".yarnrc.yml",
	"pnpm-lock.yaml", "pnpm-workspace.yaml", "bun.lock", "bun.lockb", ".npmrc", "requirements.txt", ".python-version", ".nvmrc"}

// DepsKey is a digest of what install depends on: the command, env (the app's variables, not
// its secrets) and the manifest files it reads.
// An install of the same key gives the same dependencies, so a build may reuse the previous
// release's (node_modules, .venv) instead of running it. When install is not one detect writes,
// installs the app's own code (pip install .) or names local code it cannot place (workspaces,
// paths outside the tree; -e, -r or path lines in requirements.txt), every file of the source
// goes into the key: only the same source reuses. The files of file:/link: dependencies inside
// the tree go in.
func DepsKey(files Files, install string, env map[string]string) string {
	h := sha256.New()
	put := func(parts ...string) {
		for _, p := range parts {
			h.Write([]byte(p))
			h.Write([]byte{0})
		}
	}
	put("install", install)
	for _, k := range slices.Sorted(maps.Keys(env)) {
		put("env", k, env[k])
	}
	local, unknown := localDeps(files)
	for _, n := range slices.Sorted(maps.Keys(files)) {
		if slices.Contains(manifests, n) || unknown || !knownInstall(install) || slices.ContainsFunc(local, func(dir string) bool {
			return strings.HasPrefix(n, dir+"/")
		}) {
			put("file", n, string(files[n]))
		}
	}
	return hex.EncodeToString(h.Sum(nil))
}

// knownInstall says whether install is one of the package managers' installs detect writes.
func knownInstall(install string) bool {
	if install == pythonRequirements {
		return true
	}
	for _, m := range managers {
		if install == m.install || install == m.frozen {
			return true
		}
	}
	return false
}

// localDeps is the directories of the source that package.json's dependencies name (file: and
// link: paths inside the tree: their files go into the key); unknown when the manifests name
// local code some other way (workspaces, paths outside, requirements.txt's -e, -r or paths).
func localDeps(files Files) (dirs []string, unknown bool) {
	var pkg packageJSON
	if json.Unmarshal(files["package.json"], &pkg) == nil {
		for _, deps := range []map[string]string{pkg.Dependencies, pkg.DevDependencies} {
			for _, v := range deps {
				p, isPath := strings.CutPrefix(v, "file:")
				if !isPath {
					p, isPath = strings.CutPrefix(v, "link:")
				}
				switch {
				case isPath || strings.HasPrefix(v, "./"):
					p = path.Clean(p)
					if path.IsAbs(p) || p == "." || p == ".." || strings.HasPrefix(p, "../") {
						return nil, true
					}
					dirs = append(dirs, p)
				case strings.HasPrefix(v, "workspace:") || strings.HasPrefix(v, "portal:") || strings.HasPrefix(v, "/") ||
					strings.HasPrefix(v, "../") || strings.HasPrefix(v, "~"):
					return nil, true
				}
			}
		}
	}
	sc := bufio.NewScanner(bytes.NewReader(files["requirements.txt"]))
	for sc.Scan() {
		l := strings.TrimSpace(sc.Text())
		if strings.HasPrefix(l, "-") || strings.HasPrefix(l, ".") || strings.HasPrefix(l, "/") || strings.Contains(l, "file:") {
			return nil, true
		}
	}
	return dirs, false
}

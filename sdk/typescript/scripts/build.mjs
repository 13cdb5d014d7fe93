// Builds dist/esm (ES modules) and dist/cjs (CommonJS), each with .d.ts files.
import { execFileSync } from "node:child_process";
import { mkdirSync, rmSync, writeFileSync } from "node:fs";
import { createRequire } from "node:module";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

const root = join(dirname(fileURLToPath(import.meta.url)), "..");
const tsc = createRequire(import.meta.url).resolve("typescript/bin/tsc");
rmSync(join(root, "dist"), { recursive: true, force: true });
for (const [project, type] of [["tsconfig.json", "module"], ["tsconfig.cjs.json", "commonjs"]]) {
  execFileSync(process.execPath, [tsc, "-p", join(root, project)], { stdio: "inherit", cwd: root });
  const out = join(root, "dist", type === "module" ? "esm" : "cjs");
  mkdirSync(out, { recursive: true });
  // The package is "type": "module"; the CommonJS half needs its own marker.
  writeFileSync(join(out, "package.json"), JSON.stringify({ type }) + "\n");
}
console.log("built dist/esm and dist/cjs");

import { defineConfig } from "vite";

// The console is built into dist/console and embedded into the Go binary (web/embed.go). No
// inline scripts (the server's CSP forbids them) and nothing from a CDN.
export default defineConfig({
  base: "/",
  oxc: { jsx: { runtime: "automatic", importSource: "preact" } },
  build: {
    outDir: "dist/console",
    emptyOutDir: true,
    target: "es2022",
    assetsInlineLimit: 0,
    modulePreload: { polyfill: false },
    sourcemap: false,
    reportCompressedSize: true,
  },
});

/**
 * Directory watch and archives (docs/files.md): `files.watch`, `files.uploadDir` and
 * `files.downloadDir` over `GET …/files/watch` and `GET`/`PUT …/files/archive`.
 */
import { APIConnectionError, PandaStackError, errorFromPayload } from "./errors.js";
import { type TarEntry, packTar, unpackTar } from "./tar.js";

/** One change in a watched directory. */
export interface FileEvent {
  /** `create`, `write`, `remove`, `rename` (`from` is the old path) or `overflow` (events were lost). */
  type: "create" | "write" | "remove" | "rename" | "overflow" | (string & {});
  path: string;
  from?: string;
  dir: boolean;
  message?: string;
}

/**
 * An open watch: it is in place when you have it. Iterate it with `for await` for
 * {@link FileEvent}s (it ends only when closed or the stream breaks); `close()` ends it.
 */
export class WatchHandle implements AsyncIterable<FileEvent> {
  /** The watched directory, as the server resolved it. */
  readonly path: string;
  private closed = false;

  /** @internal */
  constructor(
    private readonly lines: AsyncGenerator<Record<string, unknown>, void, undefined>,
    private readonly abort: AbortController,
    first: Record<string, unknown>,
    private readonly requestId: () => string | undefined,
  ) {
    this.path = String(first.path ?? "");
  }

  /** @internal opens the stream and waits for its first line, "ready". */
  static async open(
    lines: AsyncGenerator<Record<string, unknown>, void, undefined>,
    abort: AbortController,
    requestId: () => string | undefined,
  ): Promise<WatchHandle> {
    let first: IteratorResult<Record<string, unknown>, void>;
    try {
      first = await lines.next();
    } catch (e) {
      abort.abort();
      throw e;
    }
    if (first.done || first.value.type !== "ready") {
      abort.abort();
      if (!first.done && first.value.error) throw errorFromPayload(200, { error: first.value.error }, requestId());
      throw new APIConnectionError("the watch ended before it was ready", { requestId: requestId() });
    }
    return new WatchHandle(lines, abort, first.value, requestId);
  }

  async *[Symbol.asyncIterator](): AsyncGenerator<FileEvent, void, undefined> {
    try {
      for (;;) {
        let r: IteratorResult<Record<string, unknown>, void>;
        try {
          r = await this.lines.next();
        } catch (e) {
          if (this.closed) return;
          throw e;
        }
        if (r.done) return;
        const d = r.value;
        if (d.type === "error" || d.error) throw errorFromPayload(200, { error: d.error }, this.requestId());
        yield { type: String(d.type ?? ""), path: String(d.path ?? ""), from: d.from as string | undefined, dir: Boolean(d.dir), message: d.message as string | undefined };
      }
    } finally {
      this.close();
    }
  }

  /** End the watch (closes its connection). */
  close(): void {
    if (this.closed) return;
    this.closed = true;
    this.abort.abort();
  }
}

// The Node modules the directory copies use, typed here (the package is also compiled for the
// browser, without Node's types) and loaded only when called.
interface Stats {
  mode: number;
  isDirectory(): boolean;
  isFile(): boolean;
  isSymbolicLink(): boolean;
}
interface NodeFs {
  stat(p: string): Promise<Stats>;
  lstat(p: string): Promise<Stats>;
  readdir(p: string): Promise<string[]>;
  readlink(p: string): Promise<string>;
  readFile(p: string): Promise<Uint8Array>;
  mkdir(p: string, o: { recursive: boolean }): Promise<unknown>;
  realpath(p: string): Promise<string>;
  rm(p: string, o: { force: boolean }): Promise<void>;
  symlink(target: string, p: string): Promise<void>;
  writeFile(p: string, data: Uint8Array, o: { mode: number; flag: string }): Promise<void>;
}
interface NodePath {
  join(...parts: string[]): string;
  sep: string;
}
interface NodeZlib {
  gzipSync(b: Uint8Array): Uint8Array;
  gunzipSync(b: Uint8Array): Uint8Array;
}

const load = (name: string): Promise<unknown> => import(name);

async function node(): Promise<{ fs: NodeFs; path: NodePath; zlib: NodeZlib }> {
  const [fs, path, zlib] = await Promise.all([load("node:fs/promises"), load("node:path"), load("node:zlib")]);
  return { fs: fs as NodeFs, path: path as NodePath, zlib: zlib as NodeZlib };
}

/** @internal a .tar.gz of local directory `dir`'s contents (directories, files, symlinks as links). Node only. */
export async function packDir(dir: string): Promise<Uint8Array> {
  const { fs, path, zlib } = await node();
  if (!(await fs.stat(dir)).isDirectory()) throw new TypeError(`${dir} is not a directory`);
  const entries: TarEntry[] = [];
  const walk = async (rel: string): Promise<void> => {
    const names = (await fs.readdir(path.join(dir, rel))).sort();
    for (const name of names) {
      const r = rel ? `${rel}/${name}` : name;
      const full = path.join(dir, r);
      const st = await fs.lstat(full);
      const mode = st.mode & 0o7777;
      if (st.isSymbolicLink()) entries.push({ name: r, type: "symlink", mode, linkname: await fs.readlink(full) });
      else if (st.isDirectory()) {
        entries.push({ name: r, type: "dir", mode });
        await walk(r);
      } else if (st.isFile()) entries.push({ name: r, type: "file", mode, data: new Uint8Array(await fs.readFile(full)) });
    }
  };
  await walk("");
  return new Uint8Array(zlib.gzipSync(packTar(entries)));
}

/**
 * @internal unpacks a .tar.gz into local directory `dir` (made if missing); returns the entries
 * it held. What the sandbox sends is not trusted: names with `..` or a leading `/`, and paths a
 * symlink would lead out of `dir`, are refused; only directories, files and symlinks are made.
 */
export async function unpackDir(targz: Uint8Array, dir: string): Promise<number> {
  const { fs, path, zlib } = await node();
  await fs.mkdir(dir, { recursive: true });
  const root = await fs.realpath(dir);
  let count = 0;
  for (const e of unpackTar(new Uint8Array(zlib.gunzipSync(targz)))) {
    count++;
    const parts = e.name.split("/").filter((p) => p && p !== ".");
    if (e.name.startsWith("/") || parts.includes("..")) {
      throw new PandaStackError(`archive entry ${JSON.stringify(e.name)} leads out of ${dir}`, { code: "bad_archive" });
    }
    if (!parts.length || (e.type !== "dir" && e.type !== "file" && e.type !== "symlink")) continue;
    const parent = path.join(root, ...parts.slice(0, -1));
    await fs.mkdir(parent, { recursive: true });
    const real = await fs.realpath(parent);
    if (real !== root && !real.startsWith(root + path.sep)) {
      throw new PandaStackError(`archive entry ${JSON.stringify(e.name)} leads out of ${dir} (through a symlink)`, { code: "bad_archive" });
    }
    const target = path.join(real, parts[parts.length - 1]);
    if (e.type === "dir") {
      await fs.mkdir(target, { recursive: true });
      continue;
    }
    await fs.rm(target, { force: true }); // a symlink in its place is replaced, never written through
    if (e.type === "symlink") await fs.symlink(e.linkname ?? "", target);
    else await fs.writeFile(target, e.data ?? new Uint8Array(), { mode: e.mode & 0o777, flag: "wx" });
  }
  return count;
}

/**
 * A small tar (ustar + PAX) writer and reader: enough for directories, regular files and symlinks,
 * the entries `files.uploadDir` / `files.downloadDir` move. No dependencies, no Node APIs.
 */

/** One tar entry. */
export interface TarEntry {
  name: string;
  type: "file" | "dir" | "symlink" | "link" | "other";
  mode: number;
  data?: Uint8Array;
  linkname?: string;
}

const enc = new TextEncoder();
const dec = new TextDecoder();

function field(h: Uint8Array, off: number, len: number, s: string): void {
  const b = enc.encode(s);
  h.set(b.subarray(0, len), off);
}

function octal(h: Uint8Array, off: number, len: number, n: number): void {
  field(h, off, len, n.toString(8).padStart(len - 1, "0") + "\0");
}

function header(name: string, typeflag: string, mode: number, size: number, linkname = ""): Uint8Array {
  const h = new Uint8Array(512);
  field(h, 0, 100, name);
  octal(h, 100, 8, mode & 0o7777);
  octal(h, 108, 8, 0);
  octal(h, 116, 8, 0);
  octal(h, 124, 12, size);
  octal(h, 136, 12, Math.floor(Date.now() / 1000));
  field(h, 148, 8, "        ");
  field(h, 156, 1, typeflag);
  field(h, 157, 100, linkname);
  field(h, 257, 8, "ustar\u000000");
  let sum = 0;
  for (const b of h) sum += b;
  field(h, 148, 8, sum.toString(8).padStart(6, "0") + "\0 ");
  return h;
}

function pad(n: number): Uint8Array {
  return new Uint8Array((512 - (n % 512)) % 512);
}

/** PAX records for values a ustar header cannot hold (long or non-ASCII names). */
function pax(records: Record<string, string>): Uint8Array[] {
  let body = "";
  for (const [k, v] of Object.entries(records)) {
    const rest = ` ${k}=${v}\n`;
    const restLen = enc.encode(rest).length;
    let len = restLen + String(restLen).length;
    if (String(len).length + restLen !== len) len = restLen + String(len).length;
    body += len + rest;
  }
  const b = enc.encode(body);
  return [header("PaxHeader", "x", 0o644, b.length), b, pad(b.length)];
}

const fits = (s: string): boolean => enc.encode(s).length <= 100 && /^[\x20-\x7e]*$/.test(s);

/** The bytes of a tar of entries (names relative, directories with or without a trailing /). */
export function packTar(entries: Iterable<TarEntry>): Uint8Array {
  const parts: Uint8Array[] = [];
  for (const e of entries) {
    const name = e.type === "dir" && !e.name.endsWith("/") ? e.name + "/" : e.name;
    const link = e.linkname ?? "";
    const records: Record<string, string> = {};
    if (!fits(name)) records.path = name;
    if (!fits(link)) records.linkpath = link;
    if (Object.keys(records).length) parts.push(...pax(records));
    const flag = e.type === "dir" ? "5" : e.type === "symlink" ? "2" : e.type === "link" ? "1" : "0";
    const size = e.type === "file" ? (e.data?.length ?? 0) : 0;
    parts.push(header(fits(name) ? name : name.slice(-99), flag, e.mode, size, fits(link) ? link : ""));
    if (size) parts.push(e.data as Uint8Array, pad(size));
  }
  parts.push(new Uint8Array(1024));
  let total = 0;
  for (const p of parts) total += p.length;
  const out = new Uint8Array(total);
  let off = 0;
  for (const p of parts) {
    out.set(p, off);
    off += p.length;
  }
  return out;
}

function str(b: Uint8Array, off: number, len: number): string {
  const s = b.subarray(off, off + len);
  const nul = s.indexOf(0);
  return dec.decode(nul >= 0 ? s.subarray(0, nul) : s);
}

function num(b: Uint8Array, off: number, len: number): number {
  if (b[off] & 0x80) {
    let n = 0; // base-256 (GNU): big sizes
    for (let i = off + 1; i < off + len; i++) n = n * 256 + b[i];
    return n;
  }
  const s = str(b, off, len).trim();
  return s ? parseInt(s, 8) : 0;
}

function parsePax(b: Uint8Array): Record<string, string> {
  const out: Record<string, string> = {};
  let off = 0;
  while (off < b.length) {
    let sp = off;
    while (sp < b.length && b[sp] !== 0x20) sp++;
    const len = parseInt(dec.decode(b.subarray(off, sp)), 10);
    if (!(len > 0) || off + len > b.length) break;
    const line = dec.decode(b.subarray(sp + 1, off + len - 1));
    const eq = line.indexOf("=");
    if (eq > 0) out[line.slice(0, eq)] = line.slice(eq + 1);
    off += len;
  }
  return out;
}

/** The entries of a tar (PAX and GNU long names understood). Throws on a malformed archive. */
export function* unpackTar(b: Uint8Array): Generator<TarEntry> {
  let off = 0;
  let next: Record<string, string> = {};
  while (off + 512 <= b.length) {
    const h = b.subarray(off, off + 512);
    if (h.every((x) => x === 0)) return;
    let sum = 0;
    for (let i = 0; i < 512; i++) sum += i >= 148 && i < 156 ? 32 : h[i];
    if (sum !== num(h, 148, 8)) throw new Error("not a tar archive (bad header checksum)");
    const size = num(h, 124, 12);
    const flag = String.fromCharCode(h[156] || 48);
    const data = b.subarray(off + 512, off + 512 + size);
    if (data.length < size) throw new Error("the tar archive is cut short");
    off += 512 + size + ((512 - (size % 512)) % 512);
    if (flag === "x") {
      next = { ...next, ...parsePax(data) };
      continue;
    }
    if (flag === "g") continue;
    if (flag === "L" || flag === "K") {
      next[flag === "L" ? "path" : "linkpath"] = str(data, 0, data.length);
      continue;
    }
    const prefix = str(h, 345, 155);
    let name = next.path ?? (prefix ? prefix + "/" : "") + str(h, 0, 100);
    const linkname = next.linkpath ?? str(h, 157, 100);
    next = {};
    const type = flag === "5" ? "dir" : flag === "2" ? "symlink" : flag === "1" ? "link" : flag === "0" || flag === "7" ? "file" : "other";
    if (type === "dir") name = name.replace(/\/+$/, "");
    yield { name, type, mode: num(h, 100, 8), data: type === "file" ? data : undefined, linkname: linkname || undefined };
  }
}

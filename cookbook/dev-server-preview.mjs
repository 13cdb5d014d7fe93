// A dev server in a sandbox and its preview URL: start a server as a background process, wait
// until its port answers through PandaStack's port proxy, print the URL to open.
//   PANDASTACK_BASE_URL=http://127.0.0.1:8080 PANDASTACK_API_KEY=pds_… node dev-server-preview.mjs
import http from "node:http";
import { PandaStack } from "@pandastack/sdk";

const client = new PandaStack();
const sb = await client.sandboxes.create({ template: process.env.PANDASTACK_TEST_TEMPLATE || "base", ttlSeconds: 300 });
try {
  await sb.files.write("/home/user/www/index.html", "<h1>hello from a sandbox</h1>\n");
  const server = await sb.processes.start("python3 -m http.server 8000 --directory /home/user/www");

  // The proxy serves port P of sandbox ID at P-ID.<proxy domain> (`pandastack up`: localhost).
  const api = new URL(client.baseUrl);
  const host = `8000-${sb.id}.${process.env.PANDASTACK_PROXY_DOMAIN || "localhost"}`;
  const preview = `${api.protocol}//${host}${api.port ? ":" + api.port : ""}/`;
  const get = () =>
    new Promise((resolve, reject) => {
      // Ask the API's address with the preview Host: *.localhost need not resolve here.
      const req = http.request({ host: api.hostname, port: api.port, path: "/", headers: { Host: host } }, (res) => {
        let body = "";
        res.on("data", (c) => (body += c));
        res.on("end", () => resolve({ status: res.statusCode, body }));
      });
      req.on("error", reject);
      req.end();
    });
  let page = { status: 0, body: "" };
  for (let i = 0; i < 120 && page.status !== 200; i++) {
    page = await get();
    if (page.status !== 200) await new Promise((r) => setTimeout(r, 500)); // the server is starting
  }
  if (page.status !== 200 || !page.body.includes("hello from a sandbox")) throw new Error(`preview answered ${page.status}`);
  console.log(`preview: ${preview}`);
  console.log(`server pid ${server.pid} serves: ${page.body.trim()}`);
  console.log("ok");
} finally {
  await sb.kill();
}

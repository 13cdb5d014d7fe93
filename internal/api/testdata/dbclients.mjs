// Real PostgreSQL clients of node against a managed database (TestE2EDatabases): node-postgres
// through the SNI router with TLS verified against the router's CA, and @neondatabase/serverless
// over the /sql broker. Prints one JSON object.
import { readFileSync } from "node:fs";
import pg from "pg";
import { neon, neonConfig } from "@neondatabase/serverless";

const [uri, caFile, routerPort, apiURL] = process.argv.slice(2);
const u = new URL(uri);
const out = {};

const client = new pg.Client({
  host: "127.0.0.1", port: Number(routerPort), user: decodeURIComponent(u.username),
  password: decodeURIComponent(u.password), database: u.pathname.slice(1),
  ssl: { ca: readFileSync(caFile, "utf8"), servername: u.hostname },
});
await client.connect();
out.pg = (await client.query("select $1::int + 1 as n, current_user as who", [41])).rows[0];
await client.end();

neonConfig.fetchEndpoint = () => apiURL + "/sql";
const sql = neon(uri);
out.neon = await sql`select ${"neon"}::text as who, 40 + 2 as n`;
out.neonTx = await sql.transaction([sql`select 1 as one`, sql`select count(*)::int as items from items`]);
try {
  await sql`select * from no_such_table`;
} catch (e) {
  out.neonError = { code: e.code, message: e.message };
}
console.log(JSON.stringify(out));

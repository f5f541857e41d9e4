// MCP Inspector's CLI (mcp-inspector --cli) against the gateway: tools/list
// and one tools/call, over Streamable HTTP and over stdio. The Inspector
// parses every answer with the TypeScript SDK's schemas and exits non-zero
// on a deviation.
//
//   MCP_URL=http://localhost:8080/mcp NAMING=spec CADDY=./caddy CONFIG=Caddyfile.example node inspector.mjs
import { execFile } from "node:child_process";
import { promisify } from "node:util";
import { fileURLToPath } from "node:url";
import { check, done, assert, env } from "./lib.mjs";

const run = promisify(execFile);
const bin = fileURLToPath(new URL("./node_modules/.bin/mcp-inspector", import.meta.url));
const naming = env("NAMING");
const name = (t) => `meta${naming === "safe" ? "_" : ":"}${t}`;

// inspector runs the CLI; target is the server part (a URL with its
// transport, or `-- command args...`), which must come last.
async function inspector(args, target) {
  try {
    const { stdout } = await run(bin, ["--cli", ...args, ...target], { timeout: 60_000, maxBuffer: 16 << 20 });
    return JSON.parse(stdout.slice(stdout.indexOf("{")));
  } catch (err) {
    throw new Error(`mcp-inspector ${[...args, ...target].join(" ")}: ${err.message}\n${err.stdout ?? ""}\n${err.stderr ?? ""}`);
  }
}

async function exercise(target) {
  const list = await inspector(["--method", "tools/list"], target);
  assert.deepEqual(list.tools.map((t) => t.name).sort(), ["describe", "execute", "invoke", "search"].map(name));
  // --tool-arg takes several values, so it goes before the other options.
  const call = await inspector(
    ["--tool-arg", "tool=math:add", 'input={"a":20,"b":22}', "--method", "tools/call", "--tool-name", name("invoke")],
    target,
  );
  assert.ok(!call.isError, JSON.stringify(call));
  assert.equal(call.structuredContent.sum, 42);
  const search = await inspector(
    ["--tool-arg", 'queries=["add two numbers"]', "--method", "tools/call", "--tool-name", name("search")],
    target,
  );
  assert.ok(search.structuredContent.tools.some((t) => t.name === "math:add"), JSON.stringify(search));
}

const url = process.env.MCP_URL;
if (url) {
  await check(`MCP Inspector CLI over Streamable HTTP ${url} (naming ${naming})`, () =>
    exercise([url, "--transport", "http"]),
  );
}
const config = process.env.CONFIG;
if (config) {
  await check(`MCP Inspector CLI over stdio: codemode-mcp-stdio --config ${config} (naming ${naming})`, () =>
    exercise(["--", env("CADDY"), "codemode-mcp-stdio", "--config", config]),
  );
}

done("inspector");

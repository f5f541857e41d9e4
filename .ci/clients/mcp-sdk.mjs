// The official MCP TypeScript SDK against the gateway, over Streamable HTTP
// and over stdio (caddy codemode-mcp-stdio): listTools, then callTool of
// each meta-tool with real arguments. The SDK validates every answer with
// its own schemas (zod) and every structuredContent against the tool's
// outputSchema (ajv), so a deviation from the MCP schema fails here.
//
//   MCP_URL=http://localhost:8080/mcp NAMING=spec CADDY=./caddy CONFIG=Caddyfile.example node mcp-sdk.mjs
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js";
import { check, done, assert, env } from "./lib.mjs";

const naming = env("NAMING");
const sep = naming === "safe" ? "_" : ":";
const name = (t) => `meta${sep}${t}`;

async function exercise(client, { demoCatalog }) {
  const { tools } = await client.listTools();
  assert.deepEqual(tools.map((t) => t.name).sort(), ["describe", "execute", "invoke", "search"].map(name));
  for (const t of tools) {
    assert.equal(t.inputSchema.type, "object", `${t.name} inputSchema`);
    if (t.name === name("invoke")) assert.equal(t.outputSchema, undefined, "meta:invoke declares no outputSchema");
    else assert.equal(t.outputSchema?.type, "object", `${t.name} outputSchema`);
  }

  let res = await client.callTool({ name: name("search"), arguments: { queries: ["add two numbers", "greet someone"] } });
  assert.ok(!res.isError, JSON.stringify(res));
  assert.ok(res.structuredContent.totalAvailableTools > 0);
  assert.ok(res.structuredContent.tools.some((t) => t.name === "math:add"), JSON.stringify(res.structuredContent));

  res = await client.callTool({ name: name("describe"), arguments: { toolNames: ["math:add", "nope:tool"] } });
  assert.ok(!res.isError, JSON.stringify(res));
  assert.equal(res.structuredContent.tools[0].name, "math:add");
  assert.deepEqual(res.structuredContent.notFound, ["nope:tool"]);

  const script = demoCatalog
    ? 'const r = await callTool("math:add", {a: 2, b: 3}); const g = await callTool("demo_getGreeting", {name: "Ada"}); return {sum: r.sum, g}'
    : 'const r = await callTool("math:add", {a: 2, b: 3}); const u = await callTool("text:upper", {text: "ada"}); return {sum: r.sum, u}';
  res = await client.callTool({ name: name("execute"), arguments: { script } });
  assert.ok(!res.isError, JSON.stringify(res));
  assert.equal(res.structuredContent.status, "ok", JSON.stringify(res.structuredContent));
  assert.equal(res.structuredContent.result.sum, 5);
  if (demoCatalog) assert.equal(res.structuredContent.result.g.message, "Hello, Ada!");

  res = await client.callTool({ name: name("execute"), arguments: { script: "return {" } });
  assert.equal(res.structuredContent.status, "syntax_error");

  res = await client.callTool({ name: name("invoke"), arguments: { tool: "math:add", input: { a: 1, b: 2 } } });
  assert.ok(!res.isError, JSON.stringify(res));
  assert.equal(res.structuredContent.sum, 3);

  res = await client.callTool({ name: name("invoke"), arguments: { tool: "nope:tool", input: {} } });
  assert.ok(res.isError);
  assert.match(res.content[0].text, /not found/);

  res = await client.callTool({ name: name("search"), arguments: {} });
  assert.ok(res.isError);
  assert.match(res.content[0].text, /VALIDATION_ERROR/);
}

const url = process.env.MCP_URL;
if (url) {
  await check(`TypeScript SDK over Streamable HTTP ${url} (naming ${naming})`, async () => {
    const client = new Client({ name: "ci-ts-sdk", version: "1.0.0" });
    await client.connect(new StreamableHTTPClientTransport(new URL(url)));
    try {
      await exercise(client, { demoCatalog: process.env.DEMO_CATALOG === "1" });
    } finally {
      await client.close();
    }
  });
}

const config = process.env.CONFIG;
if (config) {
  await check(`TypeScript SDK over stdio: ${env("CADDY")} codemode-mcp-stdio --config ${config} (naming ${naming})`, async () => {
    const transport = new StdioClientTransport({
      command: env("CADDY"),
      args: ["codemode-mcp-stdio", "--config", config],
      env: { ...process.env },
      stderr: "pipe",
    });
    let stderr = "";
    transport.stderr?.on("data", (d) => (stderr += d));
    const client = new Client({ name: "ci-ts-sdk-stdio", version: "1.0.0" });
    try {
      await client.connect(transport);
      await exercise(client, { demoCatalog: false });
    } catch (err) {
      throw new Error(`${err?.stack ?? err}\nserver stderr:\n${stderr.slice(-4000)}`);
    } finally {
      await client.close();
    }
  });
}

done("mcp-sdk");

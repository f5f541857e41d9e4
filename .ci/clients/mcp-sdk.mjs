// The official MCP TypeScript SDK against the gateway, over Streamable HTTP
// and over stdio (caddy codemode-mcp-stdio): listTools, then callTool of
// each meta-tool with real arguments. The SDK validates every answer with
// its own schemas (zod) and every structuredContent against the tool's
// outputSchema (ajv), so a deviation from the MCP schema fails here.
//
// Then progress: a plan whose calls the client itself answers (client:prompt,
// each answer given after a delay) runs longer than the call's timeout; with
// onprogress and resetTimeoutOnProgress the gateway's notifications/progress
// keep the call alive, without resetTimeoutOnProgress the same call times out.
// Then cancellation: a call cancelled through its AbortSignal gets no response.
//
//   MCP_URL=http://localhost:8080/mcp NAMING=spec CADDY=./caddy CONFIG=Caddyfile.example node mcp-sdk.mjs
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { ElicitRequestSchema, ErrorCode, McpError } from "@modelcontextprotocol/sdk/types.js";
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

// progress runs a plan of `calls` client:prompt calls, each answered by
// the client after answerMs, with a request timeout of timeoutMs, and
// returns the result (or the error) and the notifications.
async function progress(makeTransport, { calls, answerMs, timeoutMs, reset }) {
  const client = new Client({ name: "ci-ts-sdk-progress", version: "1.0.0" }, { capabilities: { elicitation: {} } });
  client.setRequestHandler(ElicitRequestSchema, async (req) => {
    await new Promise((r) => setTimeout(r, answerMs));
    return { action: "accept", content: { result: `answer to ${req.params.message.length} chars` } };
  });
  const errors = [];
  client.onerror = (err) => errors.push(String(err));
  await client.connect(makeTransport());
  const seen = [];
  const script = `const out = []; for (let i = 0; i < ${calls}; i++) out.push(await callTool("client:prompt", {question: "step " + i})); return out.length`;
  try {
    let result, error;
    const t0 = Date.now();
    try {
      result = await client.callTool({ name: name("execute"), arguments: { script } }, undefined, {
        timeout: timeoutMs,
        resetTimeoutOnProgress: reset,
        onprogress: (p) => seen.push({ ...p, at: Date.now() - t0 }),
      });
    } catch (err) {
      error = err;
    }
    // A notification after the result would reach onerror as one for an
    // unknown token: give a late one the time to arrive.
    await new Promise((r) => setTimeout(r, 600));
    return { result, error, seen, errors, ms: Date.now() - t0 };
  } finally {
    await client.close();
  }
}

async function exerciseProgress(makeTransport) {
  // 4 answers 350 ms apart: the plan runs >= 1.4 s, the timeout is 1 s
  // (and the example's sandbox timeout 3.5 s). Room for a loaded CI
  // machine both ways: 650 ms per round trip before the 1 s timeout, and
  // ~500 ms per round trip before the sandbox's.
  const opts = { calls: 4, answerMs: 350, timeoutMs: 1000 };
  const ok = await progress(makeTransport, { ...opts, reset: true });
  assert.equal(ok.error, undefined, `with resetTimeoutOnProgress the plan must finish: ${ok.error}`);
  assert.ok(!ok.result.isError, JSON.stringify(ok.result));
  assert.equal(ok.result.structuredContent.status, "ok", JSON.stringify(ok.result.structuredContent));
  assert.equal(ok.result.structuredContent.result, opts.calls);
  assert.ok(ok.seen.length >= 3, `notifications: ${JSON.stringify(ok.seen)}`);
  for (let i = 0; i < ok.seen.length; i++) {
    const p = ok.seen[i];
    assert.equal(typeof p.message, "string", JSON.stringify(p));
    assert.ok(p.message.length > 0 && p.message.length <= 120, JSON.stringify(p));
    assert.equal(p.total, undefined, JSON.stringify(p));
    if (i > 0) assert.ok(p.progress > ok.seen[i - 1].progress, `progress must increase: ${JSON.stringify(ok.seen)}`);
  }
  assert.match(ok.seen.at(-1).message, /client:prompt done/);
  assert.deepEqual(ok.errors, [], "no notification after the result (the SDK reports one for an unknown token)");

  const cut = await progress(makeTransport, { ...opts, reset: false });
  assert.ok(cut.error instanceof McpError && cut.error.code === ErrorCode.RequestTimeout,
    `without resetTimeoutOnProgress the same call must time out: ${cut.error ?? JSON.stringify(cut.result)}`);
  console.log(`     progress: ${ok.seen.length} notifications over ${ok.ms} ms, last ${JSON.stringify(ok.seen.at(-1))}`);
}

// cancellation cancels a plan waiting for the client's answer (client:prompt)
// through the call's AbortSignal (the SDK sends notifications/cancelled):
// the gateway stops the plan and sends no response for the call, which the
// SDK would report through onerror as one for an unknown message id; the
// session goes on. stopped tells whether the client saw the plan's own
// request cancelled (over stdio; over HTTP that notification may come after
// the call's stream has ended, with nowhere to go).
async function cancellation(makeTransport, { stopped }) {
  const client = new Client({ name: "ci-ts-sdk-cancel", version: "1.0.0" }, { capabilities: { elicitation: {} } });
  let asked, aborted;
  const askedP = new Promise((r) => (asked = r));
  const abortedP = new Promise((r) => (aborted = r));
  client.setRequestHandler(ElicitRequestSchema, (_req, extra) => new Promise((_resolve, reject) => {
    asked();
    extra.signal.addEventListener("abort", () => {
      aborted();
      reject(new Error("cancelled"));
    });
  }));
  const errors = [];
  client.onerror = (err) => errors.push(String(err));
  await client.connect(makeTransport());
  try {
    const ac = new AbortController();
    const call = client.callTool({ name: name("execute"), arguments: { script: 'return await callTool("client:prompt", {question: "wait"})' } },
      undefined, { signal: ac.signal });
    await askedP;
    ac.abort("ci: cancelled");
    await assert.rejects(call);
    if (stopped) {
      let timer;
      await Promise.race([abortedP, new Promise((_, reject) => (timer = setTimeout(() => reject(new Error("the plan's client:prompt was not cancelled")), 10000)))]);
      clearTimeout(timer);
    }
    // A response to the cancelled call would arrive now.
    await new Promise((r) => setTimeout(r, 1000));
    assert.deepEqual(errors, [], "no response to the cancelled call (the SDK reports one for an unknown message ID)");
    const { tools } = await client.listTools();
    assert.equal(tools.length, 4);
  } finally {
    await client.close();
  }
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
  await check(`TypeScript SDK over Streamable HTTP ${url}: notifications/progress of a long plan, resetTimeoutOnProgress`, async () => {
    await exerciseProgress(() => new StreamableHTTPClientTransport(new URL(url)));
  });
  await check(`TypeScript SDK over Streamable HTTP ${url}: a cancelled call (notifications/cancelled) gets no response`, async () => {
    await cancellation(() => new StreamableHTTPClientTransport(new URL(url)), { stopped: false });
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
  await check(`TypeScript SDK over stdio: notifications/progress of a long plan, resetTimeoutOnProgress`, async () => {
    await exerciseProgress(() => new StdioClientTransport({
      command: env("CADDY"),
      args: ["codemode-mcp-stdio", "--config", config],
      env: { ...process.env },
      stderr: "ignore",
    }));
  });
  await check(`TypeScript SDK over stdio: a cancelled call (notifications/cancelled) is stopped and gets no response`, async () => {
    await cancellation(() => new StdioClientTransport({
      command: env("CADDY"),
      args: ["codemode-mcp-stdio", "--config", config],
      env: { ...process.env },
      stderr: "ignore",
    }), { stopped: true });
  });
}

done("mcp-sdk");

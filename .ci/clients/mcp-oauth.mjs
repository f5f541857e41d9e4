// The official MCP TypeScript SDK's OAuth client against a protected MCP
// endpoint, as an MCP client (Claude, VS Code, Cursor) signs in: 401 ->
// protected resource metadata -> authorization server metadata -> dynamic
// registration -> authorization with PKCE S256, state and resource ->
// sign-in (the login and consent forms, as a browser posts them) -> code
// exchange -> listTools/callTool with the token -> refresh rotation, and
// reuse of the rotated refresh token revoking the grant (with REUSE_GRACE=1,
// for a server with refresh.reuse_grace: the reuse is the grace's one, and
// the successor it retired revokes the grant).
//
//   PROTECTED_MCP_URL=http://localhost:8080/private/mcp NAMING=spec node mcp-oauth.mjs
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";
import { UnauthorizedError, auth } from "@modelcontextprotocol/sdk/client/auth.js";
import { check, done, assert, env, signIn, jwtParts, ClientProvider } from "./lib.mjs";

const url = new URL(env("PROTECTED_MCP_URL"));
const naming = env("NAMING");
const name = (t) => `meta${naming === "safe" ? "_" : ":"}${t}`;
const user = process.env.OAUTH_USER ?? "demo";
const password = process.env.OAUTH_PASSWORD ?? "demo-password";

const provider = new ClientProvider({ port: 43117 });

await check("401 with an RFC 9728 challenge before sign-in", async () => {
  const res = await fetch(url, { method: "POST", headers: { "Content-Type": "application/json", Accept: "application/json, text/event-stream" }, body: "{}" });
  assert.equal(res.status, 401);
  assert.match(res.headers.get("www-authenticate") ?? "", /^Bearer resource_metadata="http/);
});

await check("SDK discovery, dynamic registration and the authorization request", async () => {
  const client = new Client({ name: "ci-ts-sdk-oauth", version: "1.0.0" });
  await assert.rejects(client.connect(new StreamableHTTPClientTransport(url, { authProvider: provider })), UnauthorizedError);
  assert.ok(provider.client?.client_id, "the SDK registered a client");
  const a = provider.authorizationUrl;
  assert.ok(a, "the SDK asked to open an authorization URL");
  assert.equal(a.searchParams.get("response_type"), "code");
  assert.equal(a.searchParams.get("code_challenge_method"), "S256");
  assert.equal(a.searchParams.get("code_challenge")?.length, 43);
  assert.equal(a.searchParams.get("state"), provider.stateValue);
  assert.equal(a.searchParams.get("client_id"), provider.client.client_id);
  assert.ok(a.searchParams.get("resource"), "resource indicator (RFC 8707)");
});

let tokens;
await check("sign-in through the login and consent pages, code exchange by the SDK", async () => {
  const back = await signIn(provider.authorizationUrl, { username: user, password });
  assert.equal(back.origin + back.pathname, provider.redirect);
  assert.equal(back.searchParams.get("state"), provider.stateValue);
  assert.equal(back.searchParams.get("iss"), provider.authorizationUrl.origin, "RFC 9207 iss");
  const transport = new StreamableHTTPClientTransport(url, { authProvider: provider });
  await transport.finishAuth(back.searchParams.get("code"));
  tokens = provider.tokens();
  assert.ok(tokens.access_token && tokens.refresh_token, JSON.stringify(tokens));
  const { header, claims } = jwtParts(tokens.access_token);
  assert.equal(header.typ, "at+jwt");
  assert.equal(claims.client_id, provider.client.client_id);
});

async function listAndCall() {
  const client = new Client({ name: "ci-ts-sdk-oauth", version: "1.0.0" });
  await client.connect(new StreamableHTTPClientTransport(url, { authProvider: provider }));
  try {
    const { tools } = await client.listTools();
    assert.equal(tools.length, 4);
    const res = await client.callTool({ name: name("invoke"), arguments: { tool: "math:add", input: { a: 40, b: 2 } } });
    assert.equal(res.structuredContent?.sum, 42, JSON.stringify(res));
  } finally {
    await client.close();
  }
}

await check("listTools and callTool with the access token", listAndCall);

await check("refresh rotation by the SDK, then the rotated token's reuse revokes the grant", async () => {
  const before = provider.tokens();
  assert.equal(await auth(provider, { serverUrl: url }), "AUTHORIZED");
  const after = provider.tokens();
  assert.notEqual(after.refresh_token, before.refresh_token, "the refresh token rotated");
  assert.notEqual(after.access_token, before.access_token);
  await listAndCall(); // the new access token works

  // The old refresh token again: invalid_grant, and the whole grant ends.
  const meta = await (await fetch(new URL("/.well-known/oauth-authorization-server", provider.authorizationUrl))).json();
  const redeem = (token) =>
    fetch(meta.token_endpoint, {
      method: "POST",
      headers: { "Content-Type": "application/x-www-form-urlencoded" },
      body: new URLSearchParams({ grant_type: "refresh_token", refresh_token: token, client_id: provider.client.client_id }),
    });
  let res = await redeem(before.refresh_token);
  if (process.env.REUSE_GRACE === "1") {
    // Within the grace: a new successor; the one the SDK holds is retired.
    assert.equal(res.status, 200, "the grace's one reuse");
    res = await redeem(after.refresh_token);
  }
  assert.equal(res.status, 400);
  assert.equal((await res.json()).error, "invalid_grant");
  const probe = await fetch(url, {
    method: "POST",
    headers: { Authorization: `Bearer ${after.access_token}`, "Content-Type": "application/json", Accept: "application/json, text/event-stream" },
    body: JSON.stringify({ jsonrpc: "2.0", id: 1, method: "tools/list" }),
  });
  assert.equal(probe.status, 401);
  assert.match(probe.headers.get("www-authenticate") ?? "", /revoked/);
});

done("mcp-oauth");

// Sign-in the way today's MCP clients do it, with the official MCP
// TypeScript SDK against .ci/clients/gateway.Caddyfile:
// - a Client ID Metadata Document as client_id (the document served by
//   https://localhost:CIMD_PORT with a certificate of Caddy's internal CA):
//   sign-in with a loopback redirect URI on another port than the document
//   names, the consent page showing the name and the host as unverified,
//   tools with the token, a refresh; documents the server must refuse;
// - scope step-up: a token for "mcp" gets 403 insufficient_scope at a route
//   that needs "mcp admin"; the SDK signs in again for both and the call
//   goes through.
//
//   ISSUER=http://localhost:18500 CIMD_BASE=https://localhost:18502 node mcp-cimd.mjs
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";
import { UnauthorizedError, auth } from "@modelcontextprotocol/sdk/client/auth.js";
import { check, done, assert, env, signIn, fetchManual, jwtParts, ClientProvider } from "./lib.mjs";

const issuer = env("ISSUER").replace(/\/$/, "");
const cimdBase = env("CIMD_BASE").replace(/\/$/, "");
const user = { username: "demo", password: "demo-password" };

async function connect(url, provider) {
  const client = new Client({ name: "ci-ts-sdk-cimd", version: "1.0.0" });
  await client.connect(new StreamableHTTPClientTransport(new URL(url), { authProvider: provider }));
  return client;
}

// signInWith drives the browser part for the URL the SDK asked to open and
// hands the code back to the SDK.
async function signInWith(url, provider, onConsentPage) {
  const back = await signIn(provider.authorizationUrl, { ...user, onConsentPage });
  assert.equal(back.searchParams.get("state"), provider.stateValue);
  await new StreamableHTTPClientTransport(new URL(url), { authProvider: provider }).finishAuth(back.searchParams.get("code"));
}

const documentURL = `${cimdBase}/client.json`;

await check("the authorization server advertises Client ID Metadata Documents and the scopes", async () => {
  const meta = await (await fetch(`${issuer}/.well-known/oauth-authorization-server`)).json();
  assert.equal(meta.client_id_metadata_document_supported, true);
  assert.ok(meta.scopes_supported.includes("admin") && meta.scopes_supported.includes("offline_access"));
  const prm = await (await fetch(`${issuer}/.well-known/oauth-protected-resource`)).json();
  assert.ok(prm.scopes_supported.includes("admin"));
  assert.ok(!prm.scopes_supported.includes("offline_access"), "offline_access is not a resource scope");
});

const cimd = new ClientProvider({ clientMetadataUrl: documentURL, port: 43120 });
await check("metadata-document client: sign-in with the SDK, unverified name on the consent page, tools, refresh", async () => {
  await assert.rejects(connect(`${issuer}/mcp`, cimd), UnauthorizedError);
  assert.equal(cimd.client?.client_id, documentURL, "the SDK used the document URL as client_id, no registration");
  assert.equal(cimd.authorizationUrl.searchParams.get("client_id"), documentURL);
  assert.equal(cimd.authorizationUrl.searchParams.get("scope"), "mcp", "the scope of the 401 challenge");
  let consent = "";
  await signInWith(`${issuer}/mcp`, cimd, (page) => (consent = page));
  assert.match(consent, /caddy-codemode CI \(metadata document\)/);
  assert.match(consent, new RegExp(`id="client-host">${new URL(cimdBase).host}<`));
  assert.match(consent, /unverified/);
  assert.match(consent, /id="local-warning"/);
  const first = cimd.tokens();
  assert.equal(jwtParts(first.access_token).claims.client_id, documentURL);
  const client = await connect(`${issuer}/mcp`, cimd);
  const { tools } = await client.listTools();
  assert.equal(tools.length, 4);
  const res = await client.callTool({ name: "meta_invoke", arguments: { tool: "math:add", input: { a: 2, b: 2 } } });
  assert.equal(res.structuredContent?.sum, 4);
  await client.close();
  assert.equal(await auth(cimd, { serverUrl: new URL(`${issuer}/mcp`) }), "AUTHORIZED");
  assert.notEqual(cimd.tokens().refresh_token, first.refresh_token, "rotated");
  const again = await connect(`${issuer}/mcp`, cimd);
  await again.listTools();
  await again.close();
});

async function authorizeStatus(clientID, redirectURI) {
  const u = new URL(`${issuer}/oauth/authorize`);
  for (const [k, v] of Object.entries({
    response_type: "code", client_id: clientID, redirect_uri: redirectURI, state: "s",
    code_challenge: "E9Melhoa2OwvFrEMTJguCHaoeK1t8URWbuGJSstw-cM", code_challenge_method: "S256",
  })) u.searchParams.set(k, v);
  const res = await fetchManual(u);
  return { status: res.status, location: res.headers.get("location"), body: await res.text() };
}

await check("documents the server refuses: another client_id, a redirect to a private address, an unlisted redirect URI, http", async () => {
  for (const [id, redirect, reason] of [
    [`${cimdBase}/impostor.json`, "http://127.0.0.1:3000/oauth/callback", "is not its URL"],
    [`${cimdBase}/to-private.json`, "http://127.0.0.1:3000/oauth/callback", "loopback, private or link-local"],
    [documentURL, "http://127.0.0.1:3000/elsewhere", "redirect_uri is missing or not registered"],
    [documentURL.replace("https:", "http:"), "http://127.0.0.1:3000/oauth/callback", "unknown client_id"],
  ]) {
    const r = await authorizeStatus(id, redirect);
    assert.equal(r.status, 400, `${id}: ${r.status} ${r.body}`);
    assert.equal(r.location, null, "never redirected");
    assert.match(r.body, /invalid_/);
    assert.ok(r.body.includes(reason), `${id}: ${r.body} should name ${reason}`);
  }
});

await check("scope step-up: 403 insufficient_scope at a route that needs mcp and admin, then a sign-in for both", async () => {
  // A client without refresh tokens (the SDK would otherwise refresh,
  // which cannot widen a grant, RFC 6749 section 6).
  const p = new ClientProvider({ clientName: "caddy-codemode CI step-up", grantTypes: ["authorization_code"], port: 43121 });
  await assert.rejects(connect(`${issuer}/mcp`, p), UnauthorizedError);
  assert.equal(p.authorizationUrl.searchParams.get("scope"), "mcp");
  await signInWith(`${issuer}/mcp`, p);
  assert.equal(jwtParts(p.tokens().access_token).claims.scope, "mcp");
  assert.equal(p.tokens().refresh_token, undefined);

  const raw = await fetch(`${issuer}/admin/mcp`, {
    method: "POST",
    headers: { Authorization: `Bearer ${p.tokens().access_token}`, "Content-Type": "application/json", Accept: "application/json, text/event-stream" },
    body: JSON.stringify({ jsonrpc: "2.0", id: 1, method: "initialize", params: { protocolVersion: "2025-06-18", capabilities: {}, clientInfo: { name: "raw", version: "1" } } }),
  });
  assert.equal(raw.status, 403);
  const challenge = raw.headers.get("www-authenticate");
  assert.match(challenge, /error="insufficient_scope"/);
  assert.match(challenge, /scope="mcp admin"/);
  assert.match(challenge, /resource_metadata="/);

  p.authorizationUrl = undefined;
  await assert.rejects(connect(`${issuer}/admin/mcp`, p), UnauthorizedError);
  assert.ok(p.authorizationUrl, "the SDK started a new authorization on the 403");
  assert.equal(p.authorizationUrl.searchParams.get("scope"), "mcp admin");
  let consent = "";
  await signInWith(`${issuer}/admin/mcp`, p, (page) => (consent = page));
  assert.match(consent, /<li>admin<\/li>/, "the consent page lists the new scope");
  assert.equal(jwtParts(p.tokens().access_token).claims.scope, "mcp admin");
  const client = await connect(`${issuer}/admin/mcp`, p);
  assert.equal((await client.listTools()).tools.length, 4);
  await client.close();
});

done("mcp-cimd");

// oauth4webapi (and jose for the ID token's signature) against the gateway's
// authorization server: discovery, dynamic registration, the code flow with
// PKCE, ID token and RFC 9068 access-token validation, refresh rotation,
// revocation, and every negative found in issue 9, each refused with the
// RFC's error code; and the reuse grace of a lost refresh answer (the CI
// gateway, .ci/clients/gateway.Caddyfile, has refresh.reuse_grace 60s).
//
//   ISSUER=http://localhost:18500 node oauth4webapi.mjs
import * as oauth from "oauth4webapi";
import * as jose from "jose";
import { check, done, assert, env, signIn, fetchManual } from "./lib.mjs";

const issuer = new URL(env("ISSUER"));
const insecure = { [oauth.allowInsecureRequests]: true }; // http on loopback, development mode
const redirectUri = "http://127.0.0.1:43119/cb"; // never contacted
const user = { username: "demo", password: "demo-password" };
const resource = issuer.href.replace(/\/$/, ""); // the protected resource: the gateway itself

let as;
await check("RFC 8414 discovery", async () => {
  as = await oauth.processDiscoveryResponse(issuer, await oauth.discoveryRequest(issuer, { algorithm: "oauth2", ...insecure }));
  assert.deepEqual(as.code_challenge_methods_supported, ["S256"]);
  assert.equal(as.authorization_response_iss_parameter_supported, true);
  assert.ok(as.registration_endpoint && as.revocation_endpoint && as.jwks_uri);
  // The OpenID discovery document describes the same server.
  const oidc = await oauth.processDiscoveryResponse(issuer, await oauth.discoveryRequest(issuer, { algorithm: "oidc", ...insecure }));
  assert.equal(oidc.token_endpoint, as.token_endpoint);
});
if (!as) {
  done("oauth4webapi");
  process.exit();
}

async function register(metadata) {
  const res = await oauth.dynamicClientRegistrationRequest(as, { redirect_uris: [redirectUri], ...metadata }, insecure);
  return oauth.processDynamicClientRegistrationResponse(res);
}

// authorize builds an authorization URL with PKCE S256 and returns what the
// code exchange needs.
async function authorize(client, extra = {}) {
  const verifier = oauth.generateRandomCodeVerifier();
  const state = oauth.generateRandomState();
  const nonce = oauth.generateRandomNonce();
  const u = new URL(as.authorization_endpoint);
  const p = {
    response_type: "code", client_id: client.client_id, redirect_uri: redirectUri, state, nonce,
    scope: "openid mcp", code_challenge: await oauth.calculatePKCECodeChallenge(verifier), code_challenge_method: "S256",
    resource, ...extra,
  };
  for (const [k, v] of Object.entries(p)) if (v !== undefined) u.searchParams.set(k, v);
  return { url: u, verifier, state: p.state, nonce };
}

// codeFlow signs in and returns the validated callback parameters.
async function codeFlow(client, extra) {
  const a = await authorize(client, extra);
  const back = await signIn(a.url, user);
  return { ...a, params: oauth.validateAuthResponse(as, client, back, a.state) };
}

async function exchange(client, auth, flow, options = {}) {
  const res = await oauth.authorizationCodeGrantRequest(as, client, auth, flow.params, redirectUri, flow.verifier, { ...insecure, ...options });
  return { res, result: await oauth.processAuthorizationCodeResponse(as, client, res.clone(), { expectedNonce: flow.nonce, requireIdToken: true }) };
}

// rfcError runs a request that must fail and returns the RFC 6749 error
// oauth4webapi reports (ResponseBodyError or AuthorizationResponseError;
// a 401 with a WWW-Authenticate challenge is WWWAuthenticateChallengeError,
// whose body still carries the error).
async function rfcError(fn) {
  try {
    await fn();
  } catch (err) {
    if (err instanceof oauth.ResponseBodyError || err instanceof oauth.AuthorizationResponseError) return { error: err.error, status: err.status };
    if (err instanceof oauth.WWWAuthenticateChallengeError) {
      assert.equal(err.cause[0]?.scheme, "basic", "the challenge names Basic, the method the client tried");
      return { error: (await err.response.json()).error, status: err.status, challenge: true };
    }
    throw err;
  }
  throw new Error("the request succeeded; an error was expected");
}

async function accessProtected(token) {
  return fetch(new URL("/private", issuer), { headers: { Authorization: `Bearer ${token}` } });
}

const jwks = () => jose.createRemoteJWKSet(new URL(as.jwks_uri));

let pub, tokens;
await check("dynamic registration of a public client (RFC 7591)", async () => {
  pub = await register({ client_name: "oauth4webapi public", token_endpoint_auth_method: "none", grant_types: ["authorization_code", "refresh_token"] });
  assert.match(pub.client_id, /^mcp_/);
  assert.equal(pub.client_secret, undefined);
});

await check("code flow with PKCE S256: ID token (sub, nonce, signature) and RFC 9068 access token", async () => {
  const flow = await codeFlow(pub);
  const { res, result } = await exchange(pub, oauth.None(), flow);
  // RFC 6749 section 5.1: no cache may store the answer.
  assert.equal(res.headers.get("cache-control"), "no-store");
  assert.equal(res.headers.get("pragma"), "no-cache");
  tokens = result;
  const id = oauth.getValidatedIdTokenClaims(result);
  assert.equal(id.sub, "demo");
  assert.equal(id.nonce, flow.nonce);
  const { payload } = await jose.jwtVerify(result.id_token, jwks(), { issuer: as.issuer, audience: pub.client_id });
  assert.equal(payload.sub, "demo");
  const claims = await oauth.validateJwtAccessToken(as, new Request(new URL("/private", issuer), { headers: { Authorization: `Bearer ${result.access_token}` } }), resource, insecure);
  assert.equal(claims.sub, "demo");
  assert.equal(claims.client_id, pub.client_id);
  assert.match(claims.scope, /\bmcp\b/);
  const { protectedHeader } = await jose.jwtVerify(result.access_token, jwks(), { issuer: as.issuer, audience: resource, typ: "at+jwt" });
  assert.equal(protectedHeader.typ, "at+jwt");
  assert.equal((await accessProtected(result.access_token)).status, 200);
});

await check("the ID token is not an access token", async () => {
  const res = await accessProtected(tokens.id_token);
  assert.equal(res.status, 401);
  assert.match(res.headers.get("www-authenticate"), /invalid_token/);
});

await check("refresh rotation; the ID token of the refresh has sub; reuse of a token two rotations back revokes the grant", async () => {
  const first = tokens.refresh_token;
  const res = await oauth.refreshTokenGrantRequest(as, pub, oauth.None(), first, insecure);
  assert.equal(res.headers.get("cache-control"), "no-store");
  const fresh = await oauth.processRefreshTokenResponse(as, pub, res);
  assert.ok(fresh.refresh_token && fresh.refresh_token !== first, "rotated");
  assert.equal(oauth.getValidatedIdTokenClaims(fresh)?.sub, "demo");
  assert.equal((await accessProtected(fresh.access_token)).status, 200);
  // Narrowing to a scope that was not granted.
  let e = await rfcError(async () => oauth.processRefreshTokenResponse(as, pub,
    await oauth.refreshTokenGrantRequest(as, pub, oauth.None(), fresh.refresh_token, { ...insecure, additionalParameters: { scope: "tools:read" } })));
  assert.equal(e.error, "invalid_scope");
  // A resource the grant was not authorized for.
  e = await rfcError(async () => oauth.processRefreshTokenResponse(as, pub,
    await oauth.refreshTokenGrantRequest(as, pub, oauth.None(), fresh.refresh_token, { ...insecure, additionalParameters: { resource: "https://elsewhere.example/" } })));
  assert.equal(e.error, "invalid_target");
  // Neither refusal rotated the token: it rotates now.
  const second = await oauth.processRefreshTokenResponse(as, pub, await oauth.refreshTokenGrantRequest(as, pub, oauth.None(), fresh.refresh_token, insecure));
  // The first token again, two rotations back: invalid_grant, and the
  // newest token dies too.
  e = await rfcError(async () => oauth.processRefreshTokenResponse(as, pub, await oauth.refreshTokenGrantRequest(as, pub, oauth.None(), first, insecure)));
  assert.equal(e.error, "invalid_grant");
  e = await rfcError(async () => oauth.processRefreshTokenResponse(as, pub, await oauth.refreshTokenGrantRequest(as, pub, oauth.None(), second.refresh_token, insecure)));
  assert.equal(e.error, "invalid_grant");
  assert.equal((await accessProtected(second.access_token)).status, 401);
});

const refresh = async (token) => oauth.processRefreshTokenResponse(as, pub, await oauth.refreshTokenGrantRequest(as, pub, oauth.None(), token, insecure));

await check("reuse grace: a lost refresh answer keeps the session; its lost successor, and a second grace use, revoke", async () => {
  let { result } = await exchange(pub, oauth.None(), await codeFlow(pub));
  const t1 = result.refresh_token;
  const lost = await refresh(t1); // the client never saw this answer
  const t3 = await refresh(t1); // within the window: a new successor
  assert.notEqual(t3.refresh_token, lost.refresh_token);
  assert.equal((await accessProtected(t3.access_token)).status, 200, "the session goes on");
  const t4 = await refresh(t3.refresh_token); // and so does the chain
  assert.equal((await rfcError(() => refresh(lost.refresh_token))).error, "invalid_grant", "the retired successor");
  assert.equal((await rfcError(() => refresh(t4.refresh_token))).error, "invalid_grant", "the chain is revoked");

  ({ result } = await exchange(pub, oauth.None(), await codeFlow(pub)));
  await refresh(result.refresh_token);
  const again = await refresh(result.refresh_token);
  assert.equal((await rfcError(() => refresh(result.refresh_token))).error, "invalid_grant", "a second grace use");
  assert.equal((await accessProtected(again.access_token)).status, 401);
});

await check("revocation (RFC 7009) ends the grant", async () => {
  const { result } = await exchange(pub, oauth.None(), await codeFlow(pub));
  await oauth.processRevocationResponse(await oauth.revocationRequest(as, pub, oauth.None(), result.refresh_token, insecure));
  const res = await accessProtected(result.access_token);
  assert.equal(res.status, 401);
  assert.match(res.headers.get("www-authenticate"), /revoked/);
  const e = await rfcError(async () => oauth.processRefreshTokenResponse(as, pub, await oauth.refreshTokenGrantRequest(as, pub, oauth.None(), result.refresh_token, insecure)));
  assert.equal(e.error, "invalid_grant");
});

await check("resource with a trailing slash (as several MCP clients send it) works at the resource without", async () => {
  const { result } = await exchange(pub, oauth.None(), await codeFlow(pub, { resource: resource + "/" }), { additionalParameters: { resource: resource + "/" } });
  assert.equal((await accessProtected(result.access_token)).status, 200);
  await oauth.validateJwtAccessToken(as, new Request(new URL("/private", issuer), { headers: { Authorization: `Bearer ${result.access_token}` } }), resource, insecure);
});

await check("confidential clients: the configured one by Basic and by post, registered ones only by their method", async () => {
  const conf = { client_id: "ci-confidential" };
  const confRedirect = "http://127.0.0.1:43118/cb";
  for (const auth of [oauth.ClientSecretBasic("ci-confidential-secret"), oauth.ClientSecretPost("ci-confidential-secret")]) {
    const a = await authorize(conf, { redirect_uri: confRedirect });
    const back = await signIn(a.url, user);
    const params = oauth.validateAuthResponse(as, conf, back, a.state);
    const res = await oauth.authorizationCodeGrantRequest(as, conf, auth, params, confRedirect, a.verifier, insecure);
    const result = await oauth.processAuthorizationCodeResponse(as, conf, res, { expectedNonce: a.nonce, requireIdToken: true });
    assert.ok(result.access_token);
  }
  const basic = await register({ token_endpoint_auth_method: "client_secret_basic" });
  const post = await register({ token_endpoint_auth_method: "client_secret_post" });
  const refreshWith = async (client, auth) => rfcError(async () => oauth.processRefreshTokenResponse(as, client, await oauth.refreshTokenGrantRequest(as, client, auth, "not-a-token", insecure)));
  // Authenticated: the grant is judged (invalid_grant). Not: invalid_client.
  assert.equal((await refreshWith(basic, oauth.ClientSecretBasic(basic.client_secret))).error, "invalid_grant");
  assert.equal((await refreshWith(post, oauth.ClientSecretPost(post.client_secret))).error, "invalid_grant");
  let e = await refreshWith(basic, oauth.ClientSecretPost(basic.client_secret));
  assert.deepEqual(e, { error: "invalid_client", status: 401 }, "client_secret_basic client by client_secret_post");
  // A failed Basic attempt is answered with the Basic challenge (RFC 6749
  // section 5.2), the others without one.
  e = await refreshWith(post, oauth.ClientSecretBasic(post.client_secret));
  assert.deepEqual(e, { error: "invalid_client", status: 401, challenge: true }, "client_secret_post client by client_secret_basic");
  e = await refreshWith(basic, oauth.ClientSecretBasic("wrong"));
  assert.deepEqual(e, { error: "invalid_client", status: 401, challenge: true }, "wrong secret");
  e = await refreshWith(basic, oauth.None());
  assert.deepEqual(e, { error: "invalid_client", status: 401 }, "confidential client without a secret");
});

await check("a public client that sends a client_secret is invalid_client (post and Basic)", async () => {
  const flow = await codeFlow(pub);
  let e = await rfcError(() => exchange(pub, oauth.ClientSecretPost("guess"), flow));
  assert.deepEqual(e, { error: "invalid_client", status: 401 });
  e = await rfcError(() => exchange(pub, oauth.ClientSecretBasic("guess"), flow));
  assert.deepEqual(e, { error: "invalid_client", status: 401, challenge: true });
  // Neither refusal consumed the code.
  const { result } = await exchange(pub, oauth.None(), flow);
  assert.ok(result.access_token);
});

// rawToken posts a hand-made body, for what oauth4webapi never sends.
async function rawToken(body) {
  const res = await fetch(as.token_endpoint, { method: "POST", headers: { "Content-Type": "application/x-www-form-urlencoded" }, body });
  return { status: res.status, body: await res.json(), headers: res.headers };
}

await check("repeated parameters: code_verifier twice at the token endpoint is invalid_request", async () => {
  const flow = await codeFlow(pub);
  const wrong = oauth.generateRandomCodeVerifier();
  const base = new URLSearchParams({ grant_type: "authorization_code", code: flow.params.get("code"), redirect_uri: redirectUri, client_id: pub.client_id });
  for (const order of [[wrong, flow.verifier], [flow.verifier, wrong]]) {
    const r = await rawToken(`${base}&code_verifier=${order[0]}&code_verifier=${order[1]}`);
    assert.equal(r.status, 400);
    assert.equal(r.body.error, "invalid_request");
    assert.equal(r.headers.get("cache-control"), "no-store");
  }
  // A wrong verifier alone: invalid_grant (and the code is spent).
  const r = await rawToken(`${base}&code_verifier=${wrong}`);
  assert.equal(r.body.error, "invalid_grant");
  const again = await rawToken(`${base}&code_verifier=${flow.verifier}`);
  assert.equal(again.body.error, "invalid_grant");
});

// A registered client's redirect URI is nobody's word: a refused request is
// a page that links to it, never a redirect (RFC 9700 section 4.11.2); the
// link carries the error response the redirect would have.
async function authorizeError(extra, rawSuffix = "") {
  const a = await authorize(pub, extra);
  const res = await fetchManual(a.url.href + rawSuffix);
  const page = await res.text();
  assert.equal(res.status, 400, `${res.status} ${page}`);
  assert.equal(res.headers.get("location"), null, "no redirect to a registered client's URI");
  const link = page.match(/id="continue" href="([^"]*)"/);
  assert.ok(link, `no link back to the client: ${page}`);
  const loc = new URL(link[1].replace(/&#(\d+);/g, (_, n) => String.fromCharCode(Number(n))).replaceAll("&amp;", "&"));
  assert.equal(loc.hash, "", "error in the query, not a fragment");
  assert.equal(loc.origin + loc.pathname, redirectUri);
  return rfcError(async () => oauth.validateAuthResponse(as, pub, loc, a.state)); // checks iss too
}

await check("authorization endpoint negatives: repeated response_mode, PKCE plain or missing, a resource not served, oversized state", async () => {
  assert.equal((await authorizeError({}, "&response_mode=fragment&response_mode=query")).error, "invalid_request");
  assert.equal((await authorizeError({}, "&scope=mcp")).error, "invalid_request");
  assert.equal((await authorizeError({ code_challenge_method: "plain" })).error, "invalid_request");
  assert.equal((await authorizeError({ code_challenge: undefined, code_challenge_method: undefined })).error, "invalid_request");
  assert.equal((await authorizeError({ response_type: "token" })).error, "unsupported_response_type");
  assert.equal((await authorizeError({ scope: "mcp superuser" })).error, "invalid_scope");
  assert.equal((await authorizeError({ resource: "/relative" })).error, "invalid_target");
  // RFC 8707: only the resources the gateway serves (here the issuer and its routes).
  assert.equal((await authorizeError({ resource: "https://elsewhere.example/mcp" })).error, "invalid_target");
  // 60 KB of state used to be stored for ten minutes: now at most 2 KB.
  assert.equal((await authorizeError({ state: "x".repeat(4096) })).error, "invalid_request");
  const a = await authorize(pub);
  const form = new URLSearchParams(a.url.searchParams);
  form.set("state", "x".repeat(60 << 10));
  const res = await fetchManual(as.authorization_endpoint, { method: "POST", body: form });
  assert.equal(res.status, 400, "60 KB state by POST");
  assert.equal((await res.json()).error, "invalid_request");
});

await check("token endpoint negatives: unknown client, unsupported grant, missing verifier", async () => {
  let r = await rawToken(new URLSearchParams({ grant_type: "authorization_code", code: "x", code_verifier: oauth.generateRandomCodeVerifier(), redirect_uri: redirectUri, client_id: "nobody" }));
  assert.deepEqual([r.status, r.body.error], [401, "invalid_client"]);
  r = await rawToken(new URLSearchParams({ grant_type: "client_credentials", client_id: pub.client_id }));
  assert.deepEqual([r.status, r.body.error], [400, "unsupported_grant_type"]);
  r = await rawToken(new URLSearchParams({ grant_type: "authorization_code", code: "x", redirect_uri: redirectUri, client_id: pub.client_id }));
  assert.deepEqual([r.status, r.body.error], [400, "invalid_request"]);
});

done("oauth4webapi");

// Shared helpers of the real-client checks: a tiny test runner and the
// browser part of a sign-in (the login and consent forms, posted as a
// browser posts them: form fields, the hidden id and CSRF token, an Origin
// header, the cookies the server sets, redirects followed one by one).
import assert from "node:assert/strict";

let failures = 0;
let passed = 0;

// check runs one named check; a failure is reported and counted, and the
// next check still runs.
export async function check(name, fn) {
  const t0 = Date.now();
  try {
    await fn();
    passed++;
    console.log(`ok   ${name} (${Date.now() - t0} ms)`);
  } catch (err) {
    failures++;
    console.log(`FAIL ${name}: ${err?.stack ?? err}`);
  }
}

// done prints the summary and sets the exit code.
export function done(suite) {
  console.log(`${suite}: ${passed} passed, ${failures} failed`);
  process.exitCode = failures > 0 ? 1 : 0;
}

export { assert };

// env reads a required environment variable.
export function env(name) {
  const v = process.env[name];
  if (!v) throw new Error(`${name} is not set`);
  return v;
}

// fetchManual fetches without following redirects.
export async function fetchManual(url, init = {}) {
  return fetch(url, { ...init, redirect: "manual" });
}

function hiddenFields(html) {
  const out = {};
  for (const m of html.matchAll(/name="(id|csrf)" value="([^"]*)"/g)) out[m[1]] = m[2];
  if (!out.id || !out.csrf) throw new Error(`no id/csrf in page: ${html.slice(0, 500)}`);
  return out;
}

async function postForm(url, fields, origin, jar) {
  return jar.fetch(url, {
    method: "POST",
    headers: { "Content-Type": "application/x-www-form-urlencoded", Origin: origin },
    body: new URLSearchParams(fields),
  });
}

// CookieJar is the cookie store of one browser talking to one origin: it
// keeps what Set-Cookie says (a Max-Age of 0 or less drops the cookie) and
// sends the cookies whose Path covers the request's path. The sign-in
// secret of the login answer is such a cookie.
class CookieJar {
  cookies = new Map(); // name -> { value, path }
  async fetch(url, init = {}) {
    const path = new URL(url).pathname;
    const sent = [...this.cookies].filter(([, c]) => path.startsWith(c.path)).map(([n, c]) => `${n}=${c.value}`);
    const headers = { ...(init.headers ?? {}) };
    if (sent.length) headers.Cookie = sent.join("; ");
    const res = await fetchManual(url, { ...init, headers });
    for (const line of res.headers.getSetCookie()) {
      const [pair, ...attrs] = line.split(";").map((s) => s.trim());
      const eq = pair.indexOf("=");
      const name = pair.slice(0, eq);
      const attr = (key) => attrs.find((a) => a.toLowerCase().startsWith(key + "="))?.slice(key.length + 1);
      if (Number(attr("max-age") ?? "1") <= 0) this.cookies.delete(name);
      else this.cookies.set(name, { value: pair.slice(eq + 1), path: attr("path") ?? "/" });
    }
    return res;
  }
}

// signIn plays the browser for an authorization URL: it follows the
// authorization endpoint to the login page, signs in with username and
// password, approves the consent page when one is shown, and returns the
// URL the server finally redirects to (the client's redirect URI with code,
// state and iss), without requesting it. onConsentPage, when given, sees
// the consent page's HTML.
export async function signIn(authorizationUrl, { username, password, onConsentPage } = {}) {
  const origin = new URL(authorizationUrl).origin;
  const jar = new CookieJar();
  let res = await jar.fetch(authorizationUrl);
  assert.equal(res.status, 302, `authorize: ${res.status} ${await res.text()}`);
  let next = new URL(res.headers.get("location"), authorizationUrl);
  assert.equal(next.pathname, "/oauth/login", `authorize redirected to ${next}`);
  res = await jar.fetch(next);
  assert.equal(res.status, 200);
  let page = await res.text();
  res = await postForm(new URL("/oauth/login", origin), { ...hiddenFields(page), username, password }, origin, jar);
  assert.equal(res.status, 303, `login: ${res.status} ${await res.text()}`);
  next = new URL(res.headers.get("location"), origin);
  // The sign-in secret is the browser's cookie, never in a URL.
  assert.deepEqual([...next.searchParams.keys()], ["id"], `login answer ${next}`);
  if (next.pathname === "/oauth/consent") {
    res = await jar.fetch(next);
    page = await res.text();
    assert.equal(res.status, 200, `consent page: ${res.status} ${page}`);
    if (onConsentPage) await onConsentPage(page);
    res = await postForm(new URL("/oauth/consent", origin), { ...hiddenFields(page), decision: "approve" }, origin, jar);
    assert.equal(res.status, 303, `consent: ${res.status} ${await res.text()}`);
    next = new URL(res.headers.get("location"), origin);
  }
  assert.equal(next.pathname, "/oauth/authorize/callback", `sign-in led to ${next}`);
  res = await jar.fetch(next);
  assert.equal(res.status, 302, `callback: ${res.status} ${await res.text()}`);
  assert.equal(jar.cookies.size, 0, `cookies left after the code: ${[...jar.cookies.keys()]}`);
  return new URL(res.headers.get("location"));
}

// jwtParts decodes a compact JWT without verifying it.
export function jwtParts(token) {
  const [h, p] = token.split(".");
  const dec = (s) => JSON.parse(Buffer.from(s, "base64url").toString("utf8"));
  return { header: dec(h), claims: dec(p) };
}

// ClientProvider is an OAuthClientProvider of the MCP TypeScript SDK as an
// MCP host implements one: it keeps what the SDK hands it, and records the
// authorization URL the SDK asks to open, which signIn then drives.
// clientMetadataUrl makes it a Client ID Metadata Document client.
export class ClientProvider {
  constructor({ port, clientName = "caddy-codemode CI (MCP TypeScript SDK)", grantTypes = ["authorization_code", "refresh_token"], clientMetadataUrl } = {}) {
    this.redirect = `http://127.0.0.1:${port}/oauth/callback`; // never contacted: the sign-in stops at the redirect
    this.clientName = clientName;
    this.grantTypes = grantTypes;
    if (clientMetadataUrl) this.clientMetadataUrl = clientMetadataUrl;
    this.stateValue = crypto.randomUUID();
  }
  get redirectUrl() {
    return this.redirect;
  }
  get clientMetadata() {
    return {
      client_name: this.clientName,
      redirect_uris: [this.redirect],
      grant_types: this.grantTypes,
      response_types: ["code"],
      token_endpoint_auth_method: "none",
    };
  }
  state() {
    return this.stateValue;
  }
  clientInformation() {
    return this.client;
  }
  saveClientInformation(info) {
    this.client = info;
  }
  tokens() {
    return this.current;
  }
  saveTokens(tokens) {
    this.current = tokens;
  }
  redirectToAuthorization(authorizationUrl) {
    this.authorizationUrl = authorizationUrl;
  }
  saveCodeVerifier(v) {
    this.verifier = v;
  }
  codeVerifier() {
    return this.verifier;
  }
}

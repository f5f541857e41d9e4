// The MCP conformance suite's authorization-server scenarios against the
// gateway's own authorization server: every scenario `conformance list
// --authorization` names (metadata at RFC 8414's address, the code grant with
// PKCE S256, state, iss and a resource indicator; the token answer's
// Content-Type and Cache-Control). The suite drives the code grant through a
// browser; here the browser is signIn of ../clients/lib.mjs (the login and
// consent forms posted as a browser posts them), and its last redirect is
// delivered to the suite's callback listener.
//
// The client is a public one registered through dynamic registration
// (token_endpoint_auth_method none). A confidential client cannot be tested:
// the suite sends its secret only when the server does not list "none" among
// token_endpoint_auth_methods_supported, and the gateway lists it (docs/clients.md).
//
//   node22 authorization.mjs http://localhost:CLIENTS_PORT CALLBACK_PORT
import { spawn, execFileSync } from 'node:child_process';
import { mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { signIn } from '../clients/lib.mjs';

const [issuer, port] = process.argv.slice(2);
if (!issuer || !port) throw new Error('usage: node authorization.mjs <issuer> <callback port>');
const suite = fileURLToPath(new URL('./node_modules/@modelcontextprotocol/conformance/dist/index.js', import.meta.url));

let failed = 0;
function check(name, ok, detail = '') {
	console.log(`${ok ? 'ok  ' : 'FAIL'} ${name}${detail ? ': ' + detail : ''}`);
	if (!ok) failed++;
}

const scenarios = execFileSync(process.execPath, [suite, 'list', '--authorization'], { encoding: 'utf8' })
	.split('\n').map((l) => l.match(/^\s+- (\S+)/)?.[1]).filter(Boolean);
check('the suite names authorization-server scenarios', scenarios.length > 0, scenarios.join(' '));

const getJSON = async (url) => (await fetch(url)).json();
const metadata = await getJSON(new URL('/.well-known/oauth-authorization-server', issuer));
// The resource the gateway's protected resource metadata announces: the one
// an MCP client would send (another is invalid_target).
const { resource } = await getJSON(new URL('/.well-known/oauth-protected-resource', issuer));
const redirect = `http://127.0.0.1:${port}/callback`;
const reg = await fetch(metadata.registration_endpoint, {
	method: 'POST',
	headers: { 'Content-Type': 'application/json' },
	body: JSON.stringify({ client_name: 'MCP conformance suite', redirect_uris: [redirect], grant_types: ['authorization_code'],
		response_types: ['code'], token_endpoint_auth_method: 'none' }),
});
const client = await reg.json();
check('dynamic registration of the suite\'s public client', reg.status === 201 && client.client_id && client.token_endpoint_auth_method === 'none',
	`${reg.status} ${client.client_id ?? JSON.stringify(client)}`);

const out = mkdtempSync(join(tmpdir(), 'conformance-authorization-'));
const child = spawn(process.execPath, [suite, 'authorization', '--url', issuer, '--client-id', client.client_id,
	'--resource', resource, '--port', port, '--output-dir', out], { stdio: ['ignore', 'pipe', 'inherit'] });
let stdout = '';
let browser; // the sign-in, started when the suite prints its authorization URL
child.stdout.setEncoding('utf8');
child.stdout.on('data', (d) => {
	process.stdout.write(d);
	stdout += d;
	const url = stdout.match(/^(http\S+\?\S*response_type=code\S*)$/m)?.[1];
	if (url && !browser) {
		browser = (async () => {
			const back = await signIn(url, { username: 'demo', password: 'demo-password' });
			check('the sign-in ends at the suite\'s callback with iss', back.origin + back.pathname === redirect && back.searchParams.get('iss') === issuer,
				back.href.replace(/code=[^&]+/, 'code=…'));
			const res = await fetch(back); // the suite's listener, which then redeems the code
			check('the suite\'s callback took the code', res.status === 200, String(res.status));
		})().catch((err) => check('the browser part of the code grant', false, err?.stack ?? String(err)));
	}
});
const code = await new Promise((resolve) => child.on('exit', resolve));
await browser;
check('conformance authorization exits 0', code === 0, String(code));

// Every scenario the suite lists ran, and each of its checks succeeded.
const results = new Map(); // scenario -> checks
for (const dir of readdirSync(out)) {
	const scenario = scenarios.find((s) => dir.startsWith(`authorization-server-${s}-`));
	if (scenario) results.set(scenario, JSON.parse(readFileSync(join(out, dir, 'checks.json'), 'utf8')));
}
for (const s of scenarios) {
	const checks = results.get(s) ?? [];
	const bad = checks.filter((c) => c.status !== 'SUCCESS');
	check(`scenario ${s}: ${checks.length - bad.length} of ${checks.length} checks pass`, checks.length > 0 && bad.length === 0,
		bad.map((c) => `${c.id}: ${c.status} ${c.errorMessage ?? ''}`).join('; '));
}
rmSync(out, { recursive: true, force: true });
console.log(`conformance authorization: ${failed ? failed + ' failed' : 'all passed'}`);
process.exitCode = failed ? 1 : 0;

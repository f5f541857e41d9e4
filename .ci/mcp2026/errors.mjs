// The official TypeScript SDK v2 on the gateway's error paths, in both
// protocol eras it speaks (modern: pinned to 2026-07-28, sessionless;
// legacy: 2025-11-25 with a session), over Streamable HTTP and stdio. Each
// answer must have the shape its revision gives it, and the client must
// neither hang nor report anything through onerror:
//
//   - tools/call of an unknown tool: a JSON-RPC error -32602 (a protocol
//     error, tools.mdx "Error Handling"), not a result;
//   - invalid arguments, a script that throws, a script past the step limit:
//     a tool result (input validation is a tool execution error with isError
//     since 2025-11-25; a failed plan is a result with its status);
//   - a call cancelled through its AbortSignal (over HTTP in the modern era
//     the SDK closes the stream, elsewhere it sends notifications/cancelled):
//     rejected on the client, no late answer, the connection goes on;
//   - ping: {} in the legacy era; 2026-07-28 removed it, so the SDK refuses
//     it itself, and the gateway answers a raw one 404 with -32601 as the
//     revision's transport says for any method it does not implement;
//   - resources/list, resources/templates/list, prompts/list: empty lists;
//   - meta:invoke of a tool only the caller answers (client:prompt), by this
//     client, which declares no elicitation: -32021 in the modern era, a
//     TOOL_NOT_CALLABLE result in the legacy one.
//
//   node errors.mjs <mcp url> <caddy binary> <Caddyfile for stdio>
import { Client, StreamableHTTPClientTransport } from '@modelcontextprotocol/client';
import { StdioClientTransport } from '@modelcontextprotocol/client/stdio';

const [url, caddy, config] = process.argv.slice(2);
if (!url || !caddy || !config) throw new Error('usage: node errors.mjs <mcp url> <caddy binary> <Caddyfile for stdio>');

let failed = 0;
function check(name, ok, detail = '') {
	console.log(`${ok ? 'ok  ' : 'FAIL'} ${name}${ok ? '' : ': ' + detail}`);
	if (!ok) failed++;
}

// within rejects when p has not settled in ms: a hang is a failure, not a
// CI timeout.
function within(p, ms, what) {
	let timer;
	return Promise.race([p, new Promise((_, reject) => (timer = setTimeout(() => reject(new Error(`no answer to ${what} in ${ms} ms`)), ms)))])
		.finally(() => clearTimeout(timer));
}

async function settle(p, what) {
	try {
		return { result: await within(p, 60_000, what) };
	} catch (error) {
		return { error };
	}
}

const show = (x) => JSON.stringify(x.error ? { error: String(x.error), code: x.error.code } : x.result)?.slice(0, 300);
const status = (x) => x.result?.structuredContent?.status;
const errorText = (x) => JSON.stringify(x.result?.structuredContent?.error ?? '');

async function exercise(where, era, transport) {
	const client = new Client({ name: 'ci-errors-2026', version: '1.0.0' },
		{ capabilities: {}, ...(era === 'modern' ? { versionNegotiation: { mode: { pin: '2026-07-28' } } } : {}) });
	const reported = [];
	client.onerror = (err) => reported.push(String(err));
	await within(client.connect(transport), 30_000, 'connect');
	const version = client.getNegotiatedProtocolVersion();
	check(`${where}: negotiated ${version}`, version === (era === 'modern' ? '2026-07-28' : '2025-11-25'), version);
	const call = (args, opts) => settle(client.callTool(args, opts), `tools/call ${args.name}`);

	let x = await call({ name: 'nope', arguments: {} });
	check(`${where}: tools/call of an unknown tool is JSON-RPC error -32602`, x.error?.code === -32602, show(x));

	x = await call({ name: 'meta:execute', arguments: { script: 42 } });
	check(`${where}: invalid arguments are a tool result with isError (VALIDATION_ERROR)`,
		x.result?.isError === true && JSON.stringify(x.result).includes('VALIDATION_ERROR'), show(x));

	x = await call({ name: 'meta:execute', arguments: { script: 'throw new Error("boom")' } });
	check(`${where}: a script that throws is a result with status runtime_error`,
		status(x) === 'runtime_error' && errorText(x).includes('boom'), show(x));

	x = await call({ name: 'meta:execute', arguments: { script: 'let s = 0; for (;;) s++; return s' } });
	check(`${where}: a script past the step limit is a result with status runtime_error`,
		status(x) === 'runtime_error' && errorText(x).includes('step limit'), show(x));

	// A tool only the caller answers, from a client without elicitation:
	// 2026-07-28's MissingRequiredClientCapabilityError (-32021, naming
	// elicitation); the older revisions' isError result TOOL_NOT_CALLABLE.
	x = await call({ name: 'meta:invoke', arguments: { tool: 'client:prompt', input: { question: '?' } } });
	if (era === 'modern') {
		check(`${where}: a caller-answered tool without elicitation is JSON-RPC error -32021`,
			x.error?.code === -32021 && JSON.stringify(x.error?.data ?? {}).includes('elicitation'), show(x));
	} else {
		check(`${where}: a caller-answered tool without elicitation is a result with TOOL_NOT_CALLABLE`,
			x.result?.isError === true && JSON.stringify(x.result).includes('TOOL_NOT_CALLABLE'), show(x));
	}

	const ac = new AbortController();
	const cancelled = call({ name: 'meta:execute', arguments: { script: 'const a = "x".repeat(1 << 20); let k = 0; for (let i = 0; i < 90000; i++) k += a.indexOf("y"); return k' } },
		{ signal: ac.signal });
	setTimeout(() => ac.abort('ci: cancelled'), 200);
	x = await cancelled;
	const abortedAt = Date.now();
	check(`${where}: a cancelled call is rejected on the client, for its cancellation`, String(x.error).includes('ci: cancelled'), show(x));

	if (era === 'legacy') {
		x = await settle(client.ping(), 'ping');
		check(`${where}: ping answers {}`, x.result !== undefined && Object.keys(x.result).length === 0, show(x));
	} else {
		x = await settle(client.ping(), 'ping');
		check(`${where}: ping, removed in 2026-07-28, is refused by the SDK itself`, x.error !== undefined, show(x));
	}

	for (const [method, list, key] of [
		['resources/list', () => client.listResources(), 'resources'],
		['resources/templates/list', () => client.listResourceTemplates(), 'resourceTemplates'],
		['prompts/list', () => client.listPrompts(), 'prompts'],
	]) {
		x = await settle(list(), method);
		check(`${where}: ${method} is an empty list`, Array.isArray(x.result?.[key]) && x.result[key].length === 0, show(x));
	}

	// An answer to the cancelled call would come when the script ran out of
	// its time (3.5 s in the preset) and reach onerror: wait that long.
	await new Promise((r) => setTimeout(r, Math.max(0, abortedAt + 4000 - Date.now())));
	x = await settle(client.listTools(), 'tools/list');
	check(`${where}: the connection goes on (tools/list)`, x.result?.tools?.length === 4, show(x));
	check(`${where}: nothing reached onerror`, reported.length === 0, JSON.stringify(reported));
	await client.close();
}

for (const era of ['modern', 'legacy']) {
	await exercise(`Streamable HTTP, era ${era}`, era, new StreamableHTTPClientTransport(new URL(url)));
	await exercise(`stdio, era ${era}`, era,
		new StdioClientTransport({ command: caddy, args: ['codemode-mcp-stdio', '--config', config], stderr: 'ignore' }));
}

// The 2026-07-28 transport: a method the server does not implement is 404
// with -32601 (ping among them). The SDK's own ping never reaches the wire.
const meta = { 'io.modelcontextprotocol/protocolVersion': '2026-07-28', 'io.modelcontextprotocol/clientCapabilities': {} };
const res = await fetch(url, {
	method: 'POST',
	headers: { 'content-type': 'application/json', accept: 'application/json, text/event-stream', 'mcp-protocol-version': '2026-07-28', 'mcp-method': 'ping' },
	body: JSON.stringify({ jsonrpc: '2.0', id: 7, method: 'ping', params: { _meta: meta } }),
});
const body = await res.text();
let answer;
try {
	answer = JSON.parse(body);
} catch {}
check('Streamable HTTP, 2026-07-28: a raw ping is 404 with JSON-RPC error -32601 and its id',
	res.status === 404 && answer?.error?.code === -32601 && answer?.id === 7, `${res.status} ${body.slice(0, 200)}`);

console.log(`errors: ${failed ? failed + ' failed' : 'all passed'}`);
process.exitCode = failed ? 1 : 0;

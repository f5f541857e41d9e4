// A client of MCP revision 2026-07-28 (the official TypeScript SDK v2, pinned
// to that revision) through a round-robin load balancer over two gateways:
// tools/list, meta:search, a meta:execute plan that calls a demo tool and a
// tool only the client answers (multi round-trip requests), meta:invoke.
// Every request must land on the other gateway than the one before, and no
// Mcp-Session-Id may ever be sent or received.
//
//   node lb.mjs http://127.0.0.1:LB_PORT/mcp
import { Client, StreamableHTTPClientTransport } from '@modelcontextprotocol/client';

const url = process.argv[2];
if (!url) throw new Error('usage: node lb.mjs <mcp url>');

const gateways = []; // X-Gateway of each answer, in order
let sessionHeaders = 0;
async function recordingFetch(input, init) {
	const req = new Request(input, init);
	if (req.headers.has('mcp-session-id')) sessionHeaders++;
	const res = await fetch(req);
	gateways.push(res.headers.get('x-gateway'));
	if (res.headers.has('mcp-session-id')) sessionHeaders++;
	return res;
}

let failed = 0;
function check(name, ok, detail = '') {
	console.log(`${ok ? 'ok  ' : 'FAIL'} ${name}${detail ? ': ' + detail : ''}`);
	if (!ok) failed++;
}

const asked = [];
const client = new Client({ name: 'ci-lb-2026', version: '1.0.0' }, {
	versionNegotiation: { mode: { pin: '2026-07-28' } },
	capabilities: { elicitation: { form: {} } },
});
client.setRequestHandler('elicitation/create', async (req) => {
	asked.push(req.params.message);
	return { action: 'accept', content: { result: 'Ada' } };
});

const text = (r) => (r.content || []).filter((c) => c.type === 'text').map((c) => c.text).join('');

await client.connect(new StreamableHTTPClientTransport(new URL(url), { fetch: recordingFetch }));
check('negotiated 2026-07-28', client.getNegotiatedProtocolVersion() === '2026-07-28', client.getNegotiatedProtocolVersion());

const list = await client.listTools();
const names = list.tools.map((t) => t.name).sort().join(' ');
check('tools/list: the four meta-tools', names === 'meta:describe meta:execute meta:invoke meta:search', names);

const search = await client.callTool({ name: 'meta:search', arguments: { queries: ['add two numbers'] } });
check('meta:search finds math:add', !search.isError && text(search).includes('math:add'), text(search).slice(0, 200));

const plan = await client.callTool({ name: 'meta:execute', arguments: { script:
	'const s = await callTool("math:add", {a: 2, b: 3}); const n = await callTool("client:prompt", {question: "name?"}); return n + " " + s.sum' } });
check('meta:execute: a plan answered by the client over multi round-trip requests',
	!plan.isError && plan.structuredContent?.status === 'ok' && plan.structuredContent?.result === 'Ada 5', text(plan).slice(0, 300));
check('the client was asked once', asked.length === 1 && asked[0].includes('client:prompt'), JSON.stringify(asked));

const invoke = await client.callTool({ name: 'meta:invoke', arguments: { tool: 'text:upper', input: { text: 'hi' } } });
check('meta:invoke text:upper', !invoke.isError && text(invoke).includes('HI'), text(invoke));

await client.close();

const answered = gateways.filter(Boolean);
let alternating = answered.length >= 6 && answered.length === gateways.length;
for (let i = 1; i < answered.length; i++) if (answered[i] === answered[i - 1]) alternating = false;
check('each request on the other gateway', alternating, answered.join(' '));
check('no Mcp-Session-Id sent or received', sessionHeaders === 0, String(sessionHeaders));

console.log(`${6 + 2 - failed} passed, ${failed} failed`);
process.exit(failed ? 1 : 0);

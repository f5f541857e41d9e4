// MCP Inspector 2 (the package's current major; its CLI runs on the
// TypeScript SDK v2) against the gateway, in both protocol eras it
// negotiates (legacy: 2025-11-25 with sessions; modern: 2026-07-28),
// over Streamable HTTP and over stdio: tools/list with --strict (the
// Inspector's portability check of every tool schema: it must report no
// error and no warning), a meta:execute plan that calls a demo tool, and a
// meta:search. Run with Node 22 (the Inspector needs >= 22.19):
//
//   node22 inspector.mjs http://127.0.0.1:PORT/mcp CADDY CONFIG
import { execFile } from 'node:child_process';
import { fileURLToPath } from 'node:url';

const [url, caddy, config] = process.argv.slice(2);
if (!url || !caddy || !config) throw new Error('usage: node inspector.mjs <mcp url> <caddy binary> <Caddyfile for stdio>');
const launcher = fileURLToPath(new URL('./node_modules/@modelcontextprotocol/inspector/clients/launcher/build/index.js', import.meta.url));

// inspector runs the CLI with this Node (the launcher's shebang would pick
// the system one) and resolves to its exit code, stdout and stderr.
function inspector(args, target) {
	return new Promise((resolve) => {
		execFile(process.execPath, [launcher, '--cli', '--format', 'json', ...args, ...target],
			{ timeout: 60_000, maxBuffer: 16 << 20 },
			(err, stdout, stderr) => resolve({ code: err ? (err.code ?? 1) : 0, stdout, stderr }));
	});
}

let failed = 0;
function check(name, ok, detail = '') {
	console.log(`${ok ? 'ok  ' : 'FAIL'} ${name}${ok ? '' : ': ' + detail}`);
	if (!ok) failed++;
}

function result(out) {
	try {
		return JSON.parse(out.stdout).result;
	} catch {
		return undefined;
	}
}

const targets = [
	['Streamable HTTP', [url]],
	['stdio', ['--', caddy, 'codemode-mcp-stdio', '--config', config]],
];
for (const [transport, target] of targets) {
	for (const era of ['legacy', 'modern']) {
		const where = `${transport}, era ${era}`;
		const common = ['--protocol-era', era];

		const list = await inspector([...common, '--method', 'tools/list', '--strict'], target);
		const names = result(list)?.tools?.map((t) => t.name).sort() ?? [];
		check(`${where}: tools/list`, list.code === 0 && names.join() === 'meta:describe,meta:execute,meta:invoke,meta:search',
			`exit ${list.code}, tools ${names}\n${list.stdout.slice(0, 500)}\n${list.stderr}`);
		// The report's lines (a stdio server's own log goes to stderr too).
		const report = list.stderr.split('\n').filter((l) => /^(Warning|Error): tool |^\s+(Path|Issue|Suggestion): |\d+ errors?, \d+ warnings?/.test(l));
		check(`${where}: --strict finds no portability problem in any tool schema`,
			list.code === 0 && report.length === 0, report.join('\n'));

		const plan = await inspector([...common, '--method', 'tools/call', '--tool-name', 'meta:execute',
			'--tool-args-json', JSON.stringify({ script: "const r = await callTool('math:add', {a: 20, b: 22}); return r.sum;" })], target);
		const done = result(plan);
		check(`${where}: meta:execute plan calling math:add`,
			plan.code === 0 && done?.structuredContent?.status === 'ok' && done.structuredContent.result === 42,
			`exit ${plan.code}\n${plan.stdout.slice(0, 800)}\n${plan.stderr}`);

		const search = await inspector([...common, '--method', 'tools/call', '--tool-name', 'meta:search',
			'--tool-args-json', JSON.stringify({ queries: ['add two numbers'] })], target);
		const found = result(search)?.structuredContent?.tools?.map((t) => t.name) ?? [];
		check(`${where}: meta:search finds math:add`, search.code === 0 && found.includes('math:add'),
			`exit ${search.code}\n${search.stdout.slice(0, 800)}\n${search.stderr}`);
	}
}

console.log(`inspector 2: ${failed ? failed + ' failed' : 'all passed'}`);
process.exitCode = failed ? 1 : 0;

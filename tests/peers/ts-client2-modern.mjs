// Peer: the TypeScript SDK 2.x client (@modelcontextprotocol/client, pinned in
// scripts/install-peers.sh) drives a running mcp-tasks server on 2026-07-28 with automatic
// version negotiation (versionNegotiation: 'auto' probes with server/discover): discover result,
// tools/list, inline tools/call checked exactly, a tool error (isError), a task-only tool refused
// with -32021 for a client that does not declare the tasks extension, confirm_action answered
// synchronously through SEP-2322 input_required rounds (the client's elicitation handler) and
// refused with -32021 for a client without elicitation. The 2.x client has no tasks support of
// its own (a resultType "task" is UnsupportedResultType in its decoder); the companion package
// @modelcontextprotocol/ext-tasks drives one task when it is installed (see ext-tasks section).
// Usage: node ts-client2-modern.mjs <node_modules dir> <server url>
import { createHash } from 'node:crypto';
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';

const [modulesDir, url] = process.argv.slice(2);
if (!modulesDir || !url) {
  console.error('usage: node ts-client2-modern.mjs <node_modules dir> <server url>');
  process.exit(2);
}
const sdk = await import(pathToFileURL(join(modulesDir, '@modelcontextprotocol/client/dist/index.mjs')).href);
const { Client, StreamableHTTPClientTransport } = sdk;

let failures = 0;
let passed = 0;
const check = (cond, what, detail) => {
  if (cond) {
    passed++;
    console.log(`ok   ${what}`);
  } else {
    failures++;
    console.log(`FAIL ${what}${detail === undefined ? '' : `: ${JSON.stringify(detail)}`}`);
  }
};
const hashChain = (seed, rounds) => {
  let cur = createHash('sha256').update(seed).digest();
  for (let i = 1; i < rounds; i++) cur = createHash('sha256').update(cur).digest();
  return cur.toString('hex');
};
const TASKS = 'io.modelcontextprotocol/tasks';

async function connect(capabilities) {
  const client = new Client({ name: 'ts-client2-peer', version: '1.0.0' }, { capabilities, versionNegotiation: { mode: 'auto' } });
  await client.connect(new StreamableHTTPClientTransport(new URL(url)));
  return client;
}

// --- a client declaring elicitation (no tasks extension: the 2.x client cannot drive tasks) ---
const prompts = [];
const client = new Client(
  { name: 'ts-client2-peer', version: '1.0.0' },
  { capabilities: { elicitation: {} }, versionNegotiation: { mode: 'auto' } },
);
client.setRequestHandler('elicitation/create', async (req) => {
  prompts.push(req.params);
  return req.params.message.endsWith('keep?') ? { action: 'decline' } : { action: 'accept', content: { confirm: true } };
});
await client.connect(new StreamableHTTPClientTransport(new URL(url)));

check(client.getNegotiatedProtocolVersion() === '2026-07-28' && client.getProtocolEra() === 'modern',
  'connect: auto negotiation lands on 2026-07-28 (modern era)', [client.getNegotiatedProtocolVersion(), client.getProtocolEra()]);
check(client.getServerVersion()?.name === 'mcp-tasks', 'server/discover: serverInfo in _meta', client.getServerVersion());
const disc = client.getDiscoverResult();
check(disc?.supportedVersions?.includes('2026-07-28') && disc?.capabilities?.tools !== undefined
  && disc?.capabilities?.extensions?.[TASKS] !== undefined && disc?.capabilities?.tasks === undefined,
  'server/discover: versions, tools + tasks extension (no legacy tasks slot)', disc);
check(Number.isInteger(disc?.ttlMs) && ['public', 'private'].includes(disc?.cacheScope),
  'server/discover: ttlMs + cacheScope', disc);

const { tools } = await client.listTools();
const byName = Object.fromEntries(tools.map((t) => [t.name, t]));
check(['hash_chain', 'wait', 'confirm_action', 'lint_json', 'unreliable_upstream'].every((n) => byName[n]?.inputSchema?.type === 'object'),
  'tools/list: the built-in tools with object input schemas', Object.keys(byName));
check(tools.every((t) => t.execution === undefined), 'tools/list: no 2025-11-25 execution field on 2026-07-28', tools.map((t) => t.execution));

const sync = await client.callTool({ name: 'hash_chain', arguments: { seed: 'ts2', rounds: 20000 } });
check(sync.isError === false && sync.structuredContent?.digest === hashChain('ts2', 20000) && sync.structuredContent?.rounds === 20000,
  'tools/call hash_chain: inline result, digest recomputed exactly', sync);
check(sync.content?.[0]?.type === 'text' && sync.content[0].text.includes(hashChain('ts2', 20000)),
  'tools/call hash_chain: text content names the digest', sync.content);

const waited = await client.callTool({ name: 'wait', arguments: { seconds: 0.2 } });
check(waited.isError === false && /Waited/.test(waited.content?.[0]?.text ?? ''), 'tools/call wait: inline result', waited);

const lint = await client.callTool({ name: 'lint_json', arguments: { text: '{nope' } });
check(lint.isError === true && /Invalid JSON/.test(lint.content?.[0]?.text ?? ''), 'tools/call lint_json bad JSON: isError result', lint);
const lintOk = await client.callTool({ name: 'lint_json', arguments: { text: '{"ok": true}' } });
check(lintOk.isError === false, 'tools/call lint_json good JSON: not an error', lintOk);

const expectError = async (what, fn, pred) => {
  try {
    const r = await fn();
    check(false, what, { unexpectedResult: r });
  } catch (e) {
    check(pred(e), what, { name: e?.constructor?.name, code: e?.code, message: e?.message, data: e?.data });
  }
};
await expectError('tools/call unreliable_upstream (task-only) without the tasks extension: -32021',
  () => client.callTool({ name: 'unreliable_upstream', arguments: { after_ms: 10 } }),
  (e) => e.code === -32021 && e.constructor.name === 'MissingRequiredClientCapabilityError'
    && e.data?.requiredCapabilities?.extensions?.[TASKS] !== undefined);
await expectError('tools/call of an unknown tool: -32602',
  () => client.callTool({ name: 'no_such_tool', arguments: {} }),
  (e) => e.code === -32602 && /no_such_tool/.test(e.message));

// confirm_action without the tasks extension: synchronous, SEP-2322 input_required rounds that
// the client fulfils through its elicitation/create handler, then retries the call.
const confirmed = await client.callTool({ name: 'confirm_action', arguments: { action: 'deploy', target: 'prod' } });
check(prompts.length === 1 && prompts[0].message === 'deploy prod?' && prompts[0].requestedSchema?.properties?.confirm?.type === 'boolean',
  'confirm_action: input_required round reached the elicitation handler', prompts);
check(confirmed.isError === false && confirmed.content?.[0]?.text === 'Confirmed: deploy prod.',
  'confirm_action: accepted answer reflected in the result', confirmed);
const declined = await client.callTool({ name: 'confirm_action', arguments: { action: 'delete', target: 'keep' } });
check(prompts.length === 2 && declined.content?.[0]?.text === 'Not confirmed: delete keep was not done.',
  'confirm_action: declined answer reflected in the result', declined);
await client.close();

// A client with no optional capabilities: confirm_action needs elicitation.
const bare = await connect({});
await expectError('confirm_action without the elicitation capability: -32021',
  () => bare.callTool({ name: 'confirm_action', arguments: { action: 'a', target: 'b' } }),
  (e) => e.code === -32021 && e.data?.requiredCapabilities?.elicitation !== undefined);
await bare.close();

// Pinned negotiation, and a pin the server does not offer fails loudly.
const pinned = new Client({ name: 'ts-client2-peer', version: '1.0.0' }, { versionNegotiation: { mode: { pin: '2026-07-28' } } });
await pinned.connect(new StreamableHTTPClientTransport(new URL(url)));
const pr = await pinned.callTool({ name: 'hash_chain', arguments: { seed: 'pin', rounds: 3 } });
check(pinned.getNegotiatedProtocolVersion() === '2026-07-28' && pr.structuredContent?.digest === hashChain('pin', 3),
  'pinned 2026-07-28: tools/call', pr);
await pinned.close();

// --- ext-tasks: one task through @modelcontextprotocol/ext-tasks (when installed) ---
const extDir = join(modulesDir, '@modelcontextprotocol/ext-tasks');
if (existsSync(extDir)) {
  const { runExtTasks } = await import('./ts-client2-ext-tasks.mjs');
  await runExtTasks({ sdk, modulesDir, url, check, hashChain });
}

const total = passed + failures;
if (failures) {
  console.log(`ts-client2 peer: ${failures} of ${total} check(s) failed`);
  process.exit(1);
}
console.log(`ts-client2 peer: all ${total} checks passed`);

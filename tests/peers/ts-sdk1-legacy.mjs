// Peer: the TypeScript SDK 1.x client (@modelcontextprotocol/sdk, pinned in
// scripts/install-peers.sh) drives the legacy lane of a running mcp-tasks server:
// initialize (2025-11-25), tools/list with execution.taskSupport, a synchronous tools/call,
// and the experimental 2025-11-25 tasks (callToolStream, getTask, listTasks, cancelTask,
// tasks/result). Usage: node ts-sdk1-legacy.mjs <sdk package dir> <server url>
import { createHash } from 'node:crypto';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';

const [sdkDir, url] = process.argv.slice(2);
if (!sdkDir || !url) {
  console.error('usage: node ts-sdk1-legacy.mjs <sdk package dir> <server url>');
  process.exit(2);
}
const load = (p) => import(pathToFileURL(join(sdkDir, 'dist/esm', p)).href);
const { Client } = await load('client/index.js');
const { StreamableHTTPClientTransport } = await load('client/streamableHttp.js');

let failures = 0;
const check = (cond, what, detail) => {
  if (cond) {
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

const transport = new StreamableHTTPClientTransport(new URL(url));
const client = new Client({ name: 'ts-sdk1-peer', version: '1.0.0' }, { capabilities: {} });
await client.connect(transport);
check(client.getServerVersion()?.name === 'mcp-tasks', 'initialize: serverInfo', client.getServerVersion());
check(transport.sessionId === undefined, 'initialize: no session id', transport.sessionId);
const caps = client.getServerCapabilities();
check(caps?.tools !== undefined && caps?.tasks?.requests?.tools?.call !== undefined, 'initialize: tools + tasks capabilities', caps);
check(transport.protocolVersion === '2025-11-25', 'negotiated 2025-11-25', transport.protocolVersion);

await client.ping();
check(true, 'ping');

const { tools } = await client.listTools();
const support = Object.fromEntries(tools.map((t) => [t.name, t.execution?.taskSupport]));
check(support.hash_chain === 'optional' && support.lint_json === 'forbidden' && support.unreliable_upstream === 'required',
  'tools/list: execution.taskSupport per policy', support);

const sync = await client.callTool({ name: 'hash_chain', arguments: { seed: 'peer', rounds: 5000 } });
check(sync.structuredContent?.digest === hashChain('peer', 5000), 'tools/call: synchronous answer', sync);

// A synchronous call with onprogress: the SDK sends _meta.progressToken and gets the
// notifications/progress on the POST's SSE stream before the answer.
const progress = [];
const waited = await client.callTool({ name: 'wait', arguments: { seconds: 2.5 } }, undefined, {
  onprogress: (p) => progress.push(p),
});
check(waited.content?.[0]?.text === 'Waited 2.5 s.', 'tools/call with onprogress: answer', waited);
check(progress.length >= 2 && progress.every((p, i) => p.total === 2500 && (i === 0 || p.progress > progress[i - 1].progress)),
  'tools/call with onprogress: increasing progress notifications', progress);

const lint = await client.callTool({ name: 'lint_json', arguments: { text: '{nope' } });
check(lint.isError === true, 'tools/call: tool error is isError', lint);

// A task through the SDK's experimental task stream: created, polled, result via tasks/result.
const seen = [];
let result;
for await (const m of client.experimental.tasks.callToolStream(
  { name: 'hash_chain', arguments: { seed: 'task', rounds: 50000 } },
  undefined,
  { task: { ttl: 60000 } },
)) {
  seen.push(m.type);
  if (m.type === 'result') result = m.result;
  if (m.type === 'error') check(false, 'task stream error', m.error?.message);
}
check(seen[0] === 'taskCreated' && seen.includes('taskStatus') && seen.at(-1) === 'result', 'tasks: created, polled, result', seen);
check(result?.structuredContent?.digest === hashChain('task', 50000), 'tasks: result via tasks/result', result);

// A task-only tool: the SDK adds params.task itself (taskSupport: required); it fails upstream.
const failed = [];
for await (const m of client.experimental.tasks.callToolStream({ name: 'unreliable_upstream', arguments: { after_ms: 50 } })) {
  failed.push(m.type);
}
check(failed[0] === 'taskCreated' && failed.at(-1) === 'error', 'tasks: required tool runs as a task and fails', failed);

// A long task: listed, read, cancelled.
let longId;
const stream = client.experimental.tasks.callToolStream({ name: 'wait', arguments: { seconds: 60 } }, undefined, { task: {} });
const first = await stream.next();
if (first.value?.type === 'taskCreated') longId = first.value.task.taskId;
await stream.return();
check(typeof longId === 'string', 'tasks: long task created', first.value);
const listed = await client.experimental.tasks.listTasks();
check(listed.tasks.some((t) => t.taskId === longId), 'tasks/list: lists the active task', listed);
const got = await client.experimental.tasks.getTask(longId);
check(got.status === 'working' && got.taskId === longId, 'tasks/get: working', got);
const cancelled = await client.experimental.tasks.cancelTask(longId);
check(cancelled.taskId === longId, 'tasks/cancel: returns the task', cancelled);
let status;
for (let i = 0; i < 100; i++) {
  status = (await client.experimental.tasks.getTask(longId)).status;
  if (status === 'cancelled') break;
  await new Promise((r) => setTimeout(r, 100));
}
check(status === 'cancelled', 'tasks: cancelled', status);

await client.close();
if (failures > 0) {
  console.log(`ts-sdk1 peer: ${failures} check(s) failed`);
  process.exit(1);
}
console.log('ts-sdk1 peer: all checks passed');

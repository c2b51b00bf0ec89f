// Part of the ts-client2 peer (tests/peers/ts-client2-modern.mjs): 2026-07-28 tasks (SEP-2663)
// through @modelcontextprotocol/ext-tasks (pinned in scripts/install-peers.sh), the official
// requester-side tasks package for the 2.x client.
//
// The 2.x Client cannot carry task wire shapes itself (its 2026 decoder rejects a
// `resultType: "task"` result as UnsupportedResultType), so ext-tasks requires the host to pass a
// `rawDispatch` for `tools/call` and `tasks/*` on a 2026-07-28 tasks server, together with the
// `v2RequestFraming` it stamps into each request's `_meta` (protocol version, client info,
// capabilities + the tasks extension). ext-tasks builds the requests, parses CreateTaskResult /
// DetailedTask with its generated V2 schemas, polls, answers input with tasks/update and cancels.
// The raw dispatch below is only the HTTP leg: one POST with the 2026-07-28 headers
// (MCP-Protocol-Version, Mcp-Method, Mcp-Name = tool name or taskId), JSON or SSE answer.
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';

const PROTOCOL = '2026-07-28';

function rawDispatcher(url) {
  let nextId = 1;
  return async (request, options = {}) => {
    const body = { jsonrpc: '2.0', id: `ext-${nextId++}`, ...request };
    // ext-tasks passes its own headers for task follow-ups (Mcp-Name: taskId); ours override
    // case-insensitively (a plain object would send both spellings, joined by a comma).
    const headers = new Headers(options.context?.headers ?? {});
    headers.set('content-type', 'application/json');
    headers.set('accept', 'application/json, text/event-stream');
    headers.set('mcp-protocol-version', PROTOCOL);
    headers.set('mcp-method', request.method);
    const p = request.params ?? {};
    const name = request.method === 'tools/call' ? p.name : request.method.startsWith('tasks/') ? p.taskId : undefined;
    if (typeof name === 'string') headers.set('mcp-name', name);
    const res = await fetch(url, { method: 'POST', headers, body: JSON.stringify(body), signal: options.signal });
    const text = await res.text();
    let msg;
    if ((res.headers.get('content-type') ?? '').includes('text/event-stream')) {
      for (const ev of text.split(/\r?\n\r?\n/)) {
        const data = ev.split(/\r?\n/).filter((l) => l.startsWith('data:')).map((l) => l.slice(5).trimStart()).join('\n');
        if (!data) continue;
        const m = JSON.parse(data);
        if (m.id === body.id) msg = m;
      }
    } else if (text) {
      msg = JSON.parse(text);
    }
    if (!msg || msg.id !== body.id) throw new Error(`no JSON-RPC answer to ${request.method} (HTTP ${res.status}): ${text.slice(0, 300)}`);
    return msg.error ? { kind: 'error', error: msg.error } : { kind: 'result', result: msg.result };
  };
}

export async function runExtTasks({ sdk, modulesDir, url, check, hashChain }) {
  const ext = await import(pathToFileURL(join(modulesDir, '@modelcontextprotocol/ext-tasks/dist/client/index.js')).href);
  const { Client, StreamableHTTPClientTransport } = sdk;
  const capabilities = { elicitation: {} };
  const clientInfo = { name: 'ts-client2-ext-tasks-peer', version: '1.0.0' };
  const client = new Client(clientInfo, { capabilities, versionNegotiation: { mode: 'auto' } });
  await client.connect(new StreamableHTTPClientTransport(new URL(url)));

  const prompts = [];
  const session = ext.createTaskSessionFromClient(client, {
    endpointId: 'mcp-tasks-peer',
    rawDispatch: rawDispatcher(url),
    v2RequestFraming: { protocolVersion: client.getNegotiatedProtocolVersion(), clientInfo, clientCapabilities: capabilities },
    onInputRequest: ext.createApplicationInputHandler({
      elicitation: async (req) => {
        prompts.push(req.params);
        return { action: 'accept', content: { confirm: true } };
      },
      sampling: async () => { throw new Error('no sampling in this peer'); },
      roots: async () => ({ roots: [] }),
    }),
  });
  try {
    // SEP-2663 (v2) from server/discover: executes, cancels, takes input; no tasks/list inventory.
    const caps = session.capabilities ?? {};
    check(caps.execution === true && caps.cancellation === true && caps.inputResponses === true && caps.inventory === 'known-handles',
      'ext-tasks: session negotiated the SEP-2663 tasks extension from server/discover', caps);

    // A task: created, polled to completion, result checked exactly.
    const rounds = 300000;
    const exec = await session.callTool('hash_chain', { seed: 'ext-tasks', rounds });
    check(exec.kind === 'task' && /^tsk_/.test(exec.handle?.taskId ?? ''), 'ext-tasks hash_chain: runs as a task',
      { kind: exec.kind, handle: exec.handle });
    const { outcome, lastTask } = await exec.settle();
    check(outcome.status === 'completed' && outcome.result?.structuredContent?.digest === hashChain('ext-tasks', rounds),
      'ext-tasks hash_chain: completed, digest recomputed exactly', { outcome, lastTask });

    // input_required answered through tasks/update by the package's input routing.
    const conf = await session.callTool('confirm_action', { action: 'ship', target: 'v2' });
    const settled = await conf.settle();
    check(conf.kind === 'task' && prompts.length === 1 && prompts[0].message === 'ship v2?'
      && settled.outcome.status === 'completed' && settled.outcome.result?.content?.[0]?.text === 'Confirmed: ship v2.',
      'ext-tasks confirm_action: input_required answered, answer reflected in the result', { prompts, outcome: settled.outcome });

    // Cancel a running task.
    const long = await session.callTool('wait', { seconds: 60 });
    const t0 = Date.now();
    await long.cancel();
    const cancelled = await long.settle();
    check(long.kind === 'task' && cancelled.outcome.status === 'cancelled' && Date.now() - t0 < 15000,
      'ext-tasks wait: cancelled', { outcome: cancelled.outcome, lastTask: cancelled.lastTask });

    // A task-only tool that fails: failed with the JSON-RPC error.
    const bad = await session.callTool('unreliable_upstream', { after_ms: 50 });
    const failedOutcome = (await bad.settle()).outcome;
    check(bad.kind === 'task' && failedOutcome.status === 'failed' && /Upstream service unavailable/.test(failedOutcome.error?.message ?? ''),
      'ext-tasks unreliable_upstream: failed with the JSON-RPC error', failedOutcome);
  } finally {
    await session.close();
    await client.close().catch(() => {});
  }
}

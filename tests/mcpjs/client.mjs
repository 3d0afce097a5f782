// An independent MCP client of an agentsilo silo: the official TypeScript
// SDK (@modelcontextprotocol/sdk, pinned in package.json and
// package-lock.json) drives a real silo's MCP server over streamable HTTP:
// refused without credentials, tools listed with their schemas, a call
// with text, one with structured content, an agent's error, progress
// notifications, the cancellation of a long call, and a call the ACL
// refuses.
//
//   node client.mjs URL API_KEY
//
// URL is the silo's every-agent MCP endpoint (http://127.0.0.1:9191/mcp);
// the silo authenticates with API keys, and API_KEY is the key of
// principal alice. It prints "ok <check>" per check and exits 1 at the
// first failure. Package mcp's TestJSClient runs it and then checks, on
// the silo, that the cancelled call's turn ended cancelled.

import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { McpError } from '@modelcontextprotocol/sdk/types.js';

const [url, apiKey] = process.argv.slice(2);
if (!url || !apiKey) {
  console.error('usage: node client.mjs URL API_KEY');
  process.exit(2);
}

function check(cond, what, detail) {
  if (!cond) {
    throw new Error(`${what}: ${detail === undefined ? '' : JSON.stringify(detail)}`);
  }
  console.log(`ok ${what}`);
}

async function connect(headers) {
  const transport = new StreamableHTTPClientTransport(new URL(url), { requestInit: { headers } });
  const client = new Client({ name: 'agentsilo-js-test', version: '1.0.0' });
  await client.connect(transport);
  return client;
}

async function main() {
  // No key: the silo answers 401 before any MCP.
  let refused;
  try {
    const c = await connect({});
    await c.close();
  } catch (e) {
    refused = e;
  }
  check(refused && /401|Unauthorized/i.test(String(refused)), 'refused without credentials', String(refused));

  const client = await connect({ Authorization: `Bearer ${apiKey}` });

  const { tools } = await client.listTools();
  const byName = Object.fromEntries(tools.map((t) => [t.name, t]));
  check(byName.Echo_echo && byName.Echo_echo.inputSchema.required.includes('agent'), 'tools/list: Echo_echo takes an agent', tools.map((t) => t.name));
  check(byName.Add_add && byName.Add_add.outputSchema && byName.Add_add.outputSchema.type === 'object', 'tools/list: Add_add has an output schema', byName.Add_add);

  const echo = await client.callTool({ name: 'Echo_echo', arguments: { agent: 'alice:e1', message: 'hello from js' } });
  check(!echo.isError && echo.content[0].type === 'text' && echo.content[0].text === 'hello from js', 'call: text', echo);

  const add = await client.callTool({ name: 'Add_add', arguments: { agent: 'alice:a1', a: 40, b: 2 } });
  check(!add.isError && add.structuredContent && add.structuredContent.sum === 42, 'call: structured content', add);

  const fail = await client.callTool({ name: 'Fail_fail', arguments: { agent: 'alice:f1', message: 'Unavailable' } });
  check(fail.isError === true && fail.content[0].text.startsWith('Unavailable:'), 'call: an agent error is isError', fail);

  let bad;
  try {
    await client.callTool({ name: 'Add_add', arguments: { agent: 'alice:a1', a: 'forty', b: 2 } });
  } catch (e) {
    bad = e;
  }
  check(bad instanceof McpError && bad.code === -32602, 'call: bad arguments are invalid params', String(bad));

  const steps = [];
  const think = await client.callTool({ name: 'Progress_think', arguments: { agent: 'alice:p1', message: 'a trip' } }, undefined, {
    onprogress: (p) => steps.push(p.message),
  });
  check(think.content[0].text === 'done: a trip' && steps.length === 3 && steps[0] === 'thinking 1/3 about "a trip"', 'call: progress notifications', { think, steps });

  // A long call, cancelled once the agent started: the SDK sends
  // notifications/cancelled and the call rejects.
  const abort = new AbortController();
  let started;
  const startedP = new Promise((resolve) => { started = resolve; });
  const slow = client.callTool({ name: 'Slow_wait', arguments: { agent: 'alice:js-slow' } }, undefined, {
    signal: abort.signal,
    onprogress: (p) => { if (p.message === 'started') started(); },
    timeout: 600000,
  });
  await startedP;
  abort.abort('enough');
  let cancelled;
  try {
    await slow;
  } catch (e) {
    cancelled = e;
  }
  check(cancelled !== undefined, 'call: cancelled', String(cancelled));

  let denied;
  try {
    await client.callTool({ name: 'Echo_echo', arguments: { agent: 'bob:e1', message: 'hi' } });
  } catch (e) {
    denied = e;
  }
  check(denied instanceof McpError && denied.code === -32031 && /Message/.test(denied.message), 'call: refused by the ACL', String(denied));

  // The session goes on after the cancel.
  const again = await client.callTool({ name: 'Echo_echo', arguments: { agent: 'alice:e1', message: 'again' } });
  check(again.content[0].text === 'again', 'call after the cancel', again);
  await client.close();
}

main().catch((e) => {
  console.error(`FAIL ${e.stack || e}`);
  process.exit(1);
});

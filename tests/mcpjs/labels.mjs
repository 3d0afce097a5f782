// Content labels over MCP with the official TypeScript SDK
// (@modelcontextprotocol/sdk, pinned): a tool call reaches the agent as a
// tool-request from outside the cluster (or, with _meta
// agentsilo.label tool-output, as tool-output), and the agent it asks on
// another silo as an agent-message; the result's _meta carries the
// reply's label (agentsilo.label, agentsilo.outside); a claim above
// tool-request counts for nothing. See docs/trust.md.
//
//   node labels.mjs URL AGENT VIA
//
// URL is a silo's every-agent MCP endpoint, AGENT the owner:alias of a
// LabelProbe agent (a test agent that says which label it got), VIA the
// address it asks on the way. It prints "ok <check>" per check and exits
// 1 at the first failure. tests' TestLabelsAcrossSilos runs it.

import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';

const [url, agent, via] = process.argv.slice(2);
if (!url || !agent || !via) {
  console.error('usage: node labels.mjs URL AGENT VIA');
  process.exit(2);
}

function check(cond, what, detail) {
  if (!cond) {
    throw new Error(`${what}: ${detail === undefined ? '' : JSON.stringify(detail)}`);
  }
  console.log(`ok ${what}`);
}

async function main() {
  const transport = new StreamableHTTPClientTransport(new URL(url), { requestInit: { headers: { 'x-agentsilo-principal': 'dev' } } });
  const client = new Client({ name: 'agentsilo-labels-test', version: '1.0.0' });
  await client.connect(transport);

  const r = await client.callTool({ name: 'LabelProbe_probe', arguments: { agent, message: `via ${via}` } });
  const text = r.content?.[0]?.text || '';
  check(!r.isError && / got tool-request outside \| .* got agent-message outside \(reply agent-message outside\)$/.test(text), 'a call is a tool-request from outside', r);
  check(r._meta?.['agentsilo.label'] === 'agent-message' && r._meta?.['agentsilo.outside'] === true, 'the result _meta carries the reply label', r._meta);

  const low = await client.callTool({ name: 'LabelProbe_probe', arguments: { agent, message: 'hello' }, _meta: { 'agentsilo.label': 'tool-output' } });
  check(/ got tool-output outside$/.test(low.content?.[0]?.text || '') && low._meta?.['agentsilo.label'] === 'tool-output', 'a call may lower its label', low);

  const raised = await client.callTool({ name: 'LabelProbe_probe', arguments: { agent, message: 'hello' }, _meta: { 'agentsilo.label': 'system' } });
  check(/ got tool-request outside$/.test(raised.content?.[0]?.text || ''), 'a claim of system counts for nothing', raised);
  await client.close();
  console.log('all ok');
}

main().catch((e) => {
  console.error(e.stack || String(e));
  process.exit(1);
});

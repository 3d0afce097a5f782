// The official TypeScript SDK answers a model agent's approval through
// MCP elicitation: the silo asks (elicitation/create) before a tool call
// that needs approval runs; accepting approves it, declining denies it.
//
//   node elicit.mjs URL
//
// URL is the silo's every-agent MCP endpoint; the caller declares the
// principal dev (a loopback silo without authentication). The model type
// Careful's tool Adder_add needs approval. It prints "ok <check>" per
// check and exits 1 at the first failure. Package mcp's
// TestJSElicitation runs it.

import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { ElicitRequestSchema } from '@modelcontextprotocol/sdk/types.js';

const [url] = process.argv.slice(2);
if (!url) {
  console.error('usage: node elicit.mjs URL');
  process.exit(2);
}

function check(cond, what, detail) {
  if (!cond) {
    throw new Error(`${what}: ${detail === undefined ? '' : JSON.stringify(detail)}`);
  }
  console.log(`ok ${what}`);
}

// connect opens a session that answers elicitations with answer.
async function connect(answer) {
  const transport = new StreamableHTTPClientTransport(new URL(url), { requestInit: { headers: { 'x-agentsilo-principal': 'dev' } } });
  const client = new Client({ name: 'agentsilo-js-elicit', version: '1.0.0' }, { capabilities: { elicitation: {} } });
  const asked = [];
  client.setRequestHandler(ElicitRequestSchema, async (req) => {
    asked.push(req.params.message);
    return answer(req);
  });
  await client.connect(transport);
  return { client, asked };
}

const text = (res) => (res.content || []).filter((c) => c.type === 'text').map((c) => c.text).join('\n');

const yes = await connect((req) => {
  const props = Object.keys(req.params.requestedSchema?.properties || {});
  check(props.includes('approve'), 'the elicitation asks for approve', req.params.requestedSchema);
  return { action: 'accept', content: { approve: true } };
});
const approved = await yes.client.callTool({ name: 'Careful_ask', arguments: { agent: 'dev:js-yes', message: 'add one' } });
check(!approved.isError && text(approved) === 'done: {"total":1}', 'accepted: the call ran', approved);
check(yes.asked.length === 1 && yes.asked[0].includes('Adder_add'), 'asked once, naming the tool', yes.asked);
await yes.client.close();

const no = await connect(() => ({ action: 'decline' }));
const denied = await no.client.callTool({ name: 'Careful_ask', arguments: { agent: 'dev:js-no', message: 'add one' } });
check(!denied.isError && text(denied).includes('denied by dev'), 'declined: the call was denied', denied);
await no.client.close();
console.log('all ok');

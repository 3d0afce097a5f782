// The working memory's MCP tools from the official TypeScript SDK
// (@modelcontextprotocol/sdk, pinned in package.json): listed with their
// input and output schemas, then an entry put, read back, listed,
// searched and deleted, on the every-agent endpoint (tools
// Memory_memory.put, ..., with the memory in the argument "agent") and
// on a memory's own endpoint (tools memory.put, ...); arguments that do
// not match a schema are invalid params.
//
//   node memory.mjs URL PRINCIPAL
//
// URL is the silo's MCP base (http://127.0.0.1:9191/mcp); the silo takes
// the principal declared in x-agentsilo-principal (no authentication,
// loopback). It prints "ok <check>" per check and exits 1 at the first
// failure. TestMemoryMCPFromTypeScript (memory/) runs it.

import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { McpError } from '@modelcontextprotocol/sdk/types.js';

const [url, principal] = process.argv.slice(2);
if (!url || !principal) {
  console.error('usage: node memory.mjs URL PRINCIPAL');
  process.exit(2);
}

function check(cond, what, detail) {
  if (!cond) {
    throw new Error(`${what}: ${detail === undefined ? '' : JSON.stringify(detail)}`);
  }
  console.log(`ok ${what}`);
}

async function connect(endpoint) {
  const transport = new StreamableHTTPClientTransport(new URL(endpoint), { requestInit: { headers: { 'x-agentsilo-principal': principal } } });
  const client = new Client({ name: 'agentsilo-memory-test', version: '1.0.0' });
  await client.connect(transport);
  return client;
}

async function refused(client, call) {
  try {
    await client.callTool(call);
  } catch (e) {
    return e;
  }
  return undefined;
}

async function main() {
  const every = await connect(url);
  try {
    const { tools } = await every.listTools();
    const byName = Object.fromEntries(tools.map((t) => [t.name, t]));
    const put = byName['Memory_memory.put'];
    check(put && put.inputSchema.properties.entry?.properties?.key && !put.inputSchema.properties.message &&
      put.inputSchema.required.includes('entry') && put.inputSchema.required.includes('agent'),
    'tools/list: Memory_memory.put takes an entry and an agent', put);
    check(put.outputSchema?.type === 'object' && put.outputSchema.properties.entry, 'tools/list: Memory_memory.put has an output schema', put);
    for (const n of ['get', 'delete', 'list', 'search']) {
      check(byName[`Memory_memory.${n}`]?.inputSchema?.properties && !byName[`Memory_memory.${n}`].inputSchema.properties.message,
        `tools/list: Memory_memory.${n} has its schema`, byName[`Memory_memory.${n}`]);
    }

    const agent = `${principal}:notes`;
    const stored = await every.callTool({
      name: 'Memory_memory.put',
      arguments: { agent, entry: { key: 'plan', text: 'ship friday', value: { day: 'friday', n: 3 }, category: 'decision', tags: ['release'], ttl: 7200000000000 } },
    });
    check(!stored.isError && stored.structuredContent?.entry?.key === 'plan' && stored.structuredContent.entry.expires,
      'put: the entry as stored', stored);

    const got = await every.callTool({ name: 'Memory_memory.get', arguments: { agent, key: 'plan' } });
    const e = got.structuredContent?.entry;
    check(!got.isError && e?.text === 'ship friday' && e.value?.day === 'friday' && e.value.n === 3 && e.category === 'decision' &&
      e.tags?.[0] === 'release' && e.ttl === 7200000000000, 'get: the stored value back', got);
    check(JSON.parse(got.content[0].text).entry.text === 'ship friday', 'get: the reply as JSON text too', got);

    const listed = await every.callTool({ name: 'Memory_memory.list', arguments: { agent, query: { category: 'decision', limit: 10 } } });
    check(!listed.isError && listed.structuredContent?.entries?.length === 1 && listed.structuredContent.entries[0].key === 'plan', 'list by category', listed);

    const found = await every.callTool({ name: 'Memory_memory.search', arguments: { agent, text: 'FRIDAY release' } });
    check(!found.isError && found.structuredContent?.entries?.[0]?.key === 'plan', 'search', found);

    const bad = await refused(every, { name: 'Memory_memory.put', arguments: { agent, entry: { text: 'no key' } } });
    check(bad instanceof McpError && bad.code === -32602, 'put without a key is invalid params', String(bad));
    const text = await refused(every, { name: 'Memory_memory.get', arguments: { agent, message: 'plan' } });
    check(text instanceof McpError && text.code === -32602, 'get with a message instead of a key is invalid params', String(text));

    const deleted = await every.callTool({ name: 'Memory_memory.delete', arguments: { agent, key: 'plan' } });
    check(!deleted.isError, 'delete', deleted);
    const gone = await every.callTool({ name: 'Memory_memory.get', arguments: { agent, key: 'plan' } });
    check(gone.isError === true && gone.content[0].text.startsWith('NotFound:'), 'get after the delete is NotFound', gone);
  } finally {
    await every.close();
  }

  // A memory's own endpoint: the tools are named by skill.
  const own = await connect(`${url}/Memory/${principal}/trip`);
  try {
    const { tools } = await own.listTools();
    const names = tools.map((t) => t.name).sort();
    check(JSON.stringify(names) === JSON.stringify(['memory.delete', 'memory.get', 'memory.list', 'memory.put', 'memory.search']), 'own endpoint: the memory tools', names);
    const put = await own.callTool({ name: 'memory.put', arguments: { entry: { key: 'hotel', text: 'Hotel Avenida' } } });
    check(!put.isError, 'own endpoint: put', put);
    const got = await own.callTool({ name: 'memory.get', arguments: { key: 'hotel' } });
    check(!got.isError && got.structuredContent?.entry?.text === 'Hotel Avenida', 'own endpoint: get', got);
  } finally {
    await own.close();
  }
}

main().catch((e) => {
  console.error(`FAIL ${e.message}`);
  process.exit(1);
});

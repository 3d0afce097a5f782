// The service directory's three MCP tools from the official TypeScript
// SDK (@modelcontextprotocol/sdk, pinned in package.json): listed, then
// search_known_services, list_known_agents and get_agent_details called
// on a silo whose directory holds an outside A2A agent "weather" and an
// MCP server "files".
//
//   node directory.mjs URL PRINCIPAL
//
// URL is the silo's every-agent MCP endpoint (http://127.0.0.1:9191/mcp);
// the silo takes the principal declared in x-agentsilo-principal (no
// authentication, loopback). It prints "ok <check>" per check and exits 1
// at the first failure. TestDirectoryMCPFromTypeScript runs it.

import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';

const [url, principal] = process.argv.slice(2);
if (!url || !principal) {
  console.error('usage: node directory.mjs URL PRINCIPAL');
  process.exit(2);
}

function check(cond, what, detail) {
  if (!cond) {
    throw new Error(`${what}: ${detail === undefined ? '' : JSON.stringify(detail)}`);
  }
  console.log(`ok ${what}`);
}

async function main() {
  const transport = new StreamableHTTPClientTransport(new URL(url), { requestInit: { headers: { 'x-agentsilo-principal': principal } } });
  const client = new Client({ name: 'agentsilo-directory-test', version: '1.0.0' });
  await client.connect(transport);
  try {
    const { tools } = await client.listTools();
    const names = tools.map((t) => t.name);
    for (const n of ['search_known_services', 'list_known_agents', 'get_agent_details']) {
      check(names.includes(n), `listed ${n}`, names);
    }

    const search = await client.callTool({ name: 'search_known_services', arguments: { query: 'weather forecast for a city' } });
    const first = search.structuredContent?.results?.[0];
    check(!search.isError && first?.name === 'weather' && first?.kind === 'a2a' && first?.call === 'A2A:{owner}:weather' && first?.score > 0,
      'search_known_services finds the outside A2A agent', search);

    const tool = await client.callTool({ name: 'search_known_services', arguments: { query: 'read a file from the archive', kind: 'mcp' } });
    check(!tool.isError && tool.structuredContent?.results?.[0]?.name === 'files' && tool.structuredContent.results[0].tools?.[0]?.name === 'read_file',
      'search_known_services finds the MCP tool', tool);

    const list = await client.callTool({ name: 'list_known_agents', arguments: { skill: 'weather' } });
    const agents = list.structuredContent?.agents ?? [];
    check(!list.isError && agents.length === 1 && agents[0].name === 'weather', 'list_known_agents by skill', list);

    const all = await client.callTool({ name: 'list_known_agents', arguments: {} });
    check(!all.isError && all.structuredContent.agents.some((a) => a.kind === 'type') && !all.structuredContent.agents.some((a) => a.kind === 'mcp'),
      'list_known_agents lists agents, not MCP servers', all);

    const details = await client.callTool({ name: 'get_agent_details', arguments: { name: 'weather' } });
    const d = details.structuredContent;
    check(!details.isError && d?.skills?.[0]?.name === 'forecast' && d.skills[0].examples?.[0] === 'will it rain in Lisbon tomorrow' && d.lastSeen,
      'get_agent_details', details);
    check(!JSON.stringify(details).includes('w-token'), 'no credential in the details', details);

    const none = await client.callTool({ name: 'get_agent_details', arguments: { name: 'nobody' } });
    check(none.isError, 'get_agent_details of nobody is an error result', none);
  } finally {
    await client.close();
  }
}

main().catch((e) => {
  console.error(String(e));
  process.exit(1);
});

// An MCP server on stdio, made with the official TypeScript SDK
// (McpServer over StdioServerTransport), for the MCP agent type's stdio
// servers (mcp.RemoteOptions.Commands): package mcp's TestRemoteStdio runs
// it as a child process of the agent.
//
//   node stdio-server.mjs
//
// Its tools: upper (the text in capitals, and the server's process id)
// and crash (the process exits at once).

import { McpServer } from '@modelcontextprotocol/sdk/server/mcp.js';
import { StdioServerTransport } from '@modelcontextprotocol/sdk/server/stdio.js';
import { z } from 'zod';

const server = new McpServer({ name: 'js-stdio', version: '1.0.0' });
server.registerTool('upper', {
  description: 'Upper-cases a text.',
  inputSchema: { text: z.string() },
  outputSchema: { text: z.string(), pid: z.number() },
}, async ({ text }) => ({
  content: [{ type: 'text', text: text.toUpperCase() }],
  structuredContent: { text: text.toUpperCase(), pid: process.pid },
}));
server.registerTool('crash', {
  description: 'Ends the server process.',
  inputSchema: {},
}, async () => process.exit(3));
await server.connect(new StdioServerTransport());

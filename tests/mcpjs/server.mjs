// An independent MCP server for agentsilo's MCP agent type: the official
// TypeScript SDK's McpServer over its StreamableHTTPServerTransport (one
// transport per session, as the SDK's own example server does), with
// tools that answer in text, in structured content and with isError.
//
//   node server.mjs
//
// It listens on 127.0.0.1 at a free port, prints "listening PORT" once
// it serves, and runs until killed. Package mcp's TestRemoteJSServer
// starts it and asks an MCP agent to list and call its tools. Requests
// must carry "x-api-key: js-key" (else 401), and the server answers each
// call with the traceparent it received, so the test sees both travel.

import { randomUUID } from 'node:crypto';
import { createServer } from 'node:http';
import { McpServer } from '@modelcontextprotocol/sdk/server/mcp.js';
import { StreamableHTTPServerTransport } from '@modelcontextprotocol/sdk/server/streamableHttp.js';
import { isInitializeRequest } from '@modelcontextprotocol/sdk/types.js';
import { z } from 'zod';

// newServer makes the MCP server of one session.
function newServer(traceparent) {
  const server = new McpServer({ name: 'js-tools', version: '1.0.0' });
  server.registerTool('echo', {
    description: 'Echoes a text, and the traceparent of the request.',
    inputSchema: { text: z.string() },
  }, async ({ text }) => ({
    content: [{ type: 'text', text: `echo: ${text}` }, { type: 'text', text: `traceparent: ${traceparent()}` }],
  }));
  server.registerTool('multiply', {
    description: 'Multiplies two numbers.',
    inputSchema: { a: z.number(), b: z.number() },
    outputSchema: { product: z.number() },
  }, async ({ a, b }) => ({
    content: [{ type: 'text', text: String(a * b) }],
    structuredContent: { product: a * b },
  }));
  server.registerTool('broken', {
    description: 'Always fails.',
    inputSchema: {},
  }, async () => ({ isError: true, content: [{ type: 'text', text: 'out of paper' }] }));
  return server;
}

const transports = {};
let lastTraceparent = '';

async function readBody(req) {
  const chunks = [];
  for await (const c of req) {
    chunks.push(c);
  }
  const s = Buffer.concat(chunks).toString();
  return s ? JSON.parse(s) : undefined;
}

const http = createServer(async (req, res) => {
  try {
    if (req.headers['x-api-key'] !== 'js-key') {
      res.writeHead(401).end('unauthorized');
      return;
    }
    if (req.headers.traceparent) {
      lastTraceparent = req.headers.traceparent;
    }
    const sid = req.headers['mcp-session-id'];
    const body = req.method === 'POST' ? await readBody(req) : undefined;
    let transport = sid ? transports[sid] : undefined;
    if (!transport) {
      if (sid || req.method !== 'POST' || !isInitializeRequest(body)) {
        res.writeHead(sid ? 404 : 400, { 'content-type': 'application/json' }).end(JSON.stringify({
          jsonrpc: '2.0', error: { code: -32000, message: sid ? 'no such session' : 'no session: initialize first' }, id: null,
        }));
        return;
      }
      transport = new StreamableHTTPServerTransport({
        sessionIdGenerator: () => randomUUID(),
        onsessioninitialized: (id) => { transports[id] = transport; },
      });
      transport.onclose = () => { if (transport.sessionId) delete transports[transport.sessionId]; };
      await newServer(() => lastTraceparent).connect(transport);
    }
    await transport.handleRequest(req, res, body);
  } catch (err) {
    if (!res.headersSent) {
      res.writeHead(500).end(String(err));
    }
  }
});

http.listen(0, '127.0.0.1', () => {
  console.log(`listening ${http.address().port}`);
});

// The official TypeScript SDK runs the MCP specification's authorization
// flow against a silo that takes an OpenID provider's tokens: refused at
// first (401), it reads the protected resource metadata the challenge
// points to, finds the provider there (its discovery), sends the user to
// its authorization endpoint with PKCE, exchanges the code for a token,
// and then lists and calls tools as the signed-in user.
//
//   node auth.mjs URL CLIENT_ID REDIRECT_URI
//
// URL is the silo's every-agent MCP endpoint; CLIENT_ID a public client
// of the provider whose redirect URI is REDIRECT_URI. The provider signs
// the user in at once, so the "browser" here only follows its answer to
// the redirect URI. It prints "ok <check>" per check and exits 1 at the
// first failure. Package mcp's TestJSAuthorization runs it.

import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { UnauthorizedError } from '@modelcontextprotocol/sdk/client/auth.js';

const [url, clientId, redirect] = process.argv.slice(2);
if (!url || !clientId || !redirect) {
  console.error('usage: node auth.mjs URL CLIENT_ID REDIRECT_URI');
  process.exit(2);
}

function check(cond, what, detail) {
  if (!cond) {
    throw new Error(`${what}: ${detail === undefined ? '' : JSON.stringify(detail)}`);
  }
  console.log(`ok ${what}`);
}

let tokens, verifier, authorizationUrl;
const provider = {
  get redirectUrl() { return redirect; },
  get clientMetadata() {
    return { client_name: 'agentsilo-auth-test', redirect_uris: [redirect], grant_types: ['authorization_code'], response_types: ['code'], token_endpoint_auth_method: 'none' };
  },
  clientInformation() { return { client_id: clientId }; },
  tokens() { return tokens; },
  saveTokens(t) { tokens = t; },
  redirectToAuthorization(u) { authorizationUrl = u; },
  saveCodeVerifier(v) { verifier = v; },
  codeVerifier() { return verifier; },
};

const first = new StreamableHTTPClientTransport(new URL(url), { authProvider: provider });
try {
  await new Client({ name: 'auth-test', version: '1.0.0' }).connect(first);
  check(false, 'refused before signing in', 'connected');
} catch (e) {
  check(e instanceof UnauthorizedError && authorizationUrl !== undefined, 'refused before signing in', `${e.constructor.name}: ${e.message}`);
}
check(authorizationUrl.searchParams.get('code_challenge_method') === 'S256', 'the authorization request uses PKCE', authorizationUrl.toString());

// The user's browser: the provider signs the user in and sends the
// browser back to the redirect URI with a code.
const answer = await fetch(authorizationUrl, { redirect: 'manual' });
const back = new URL(answer.headers.get('location'));
const code = back.searchParams.get('code');
check(code, 'the provider sends the browser back with a code', back.toString());
await first.finishAuth(code);
check(tokens?.access_token, 'the code is exchanged for a token', tokens);

const client = new Client({ name: 'auth-test', version: '1.0.0' });
await client.connect(new StreamableHTTPClientTransport(new URL(url), { authProvider: provider }));
const { tools } = await client.listTools();
check(tools.some((t) => t.name === 'Echo_echo'), 'tools/list as the signed-in user', tools.map((t) => t.name));
const r = await client.callTool({ name: 'Echo_echo', arguments: { agent: 'alice:js-auth', message: 'hello' } });
const text = r.content.map((c) => c.text || '').join('');
check(!r.isError && text.includes('hello'), 'a call as the signed-in user', r);
await client.close();
console.log('all ok');

// The official JavaScript SDK as a client of a silo that takes the tokens
// of an OpenID provider: the card names the provider, a send with a good
// token is its subject's, and a send with each refused token is
// unauthenticated.
//
//   node bearer.mjs BASE_URL ISSUER GOOD_TOKEN BAD_TOKEN...
//
// BASE_URL is the silo's A2A address; GOOD_TOKEN is alice's. It prints
// "ok <check>" per check and exits 1 at the first failure. tests/a2a's
// TestJSBearer runs it.

import { ClientFactory, ClientFactoryOptions, JsonRpcTransportFactory, RestTransportFactory, DefaultAgentCardResolver } from '@a2a-js/sdk/client';
import { Role, TaskState } from '@a2a-js/sdk';

const [base, issuer, good, ...bad] = process.argv.slice(2);
if (!base || !issuer || !good || bad.length === 0) {
  console.error('usage: node bearer.mjs BASE_URL ISSUER GOOD_TOKEN BAD_TOKEN...');
  process.exit(2);
}

function check(cond, what, detail) {
  if (!cond) {
    throw new Error(`${what}: ${detail === undefined ? '' : JSON.stringify(detail)}`);
  }
  console.log(`ok ${what}`);
}

// bearer sends token as "Authorization: Bearer" with every request.
const bearer = (token) => (input, init = {}) => {
  const headers = new Headers(init.headers || {});
  headers.set('Authorization', `Bearer ${token}`);
  return fetch(input, { ...init, headers });
};

const factory = (token) => new ClientFactory(
  ClientFactoryOptions.createFrom(ClientFactoryOptions.default, {
    transports: [new JsonRpcTransportFactory({ fetchImpl: bearer(token) }), new RestTransportFactory({ fetchImpl: bearer(token) })],
    cardResolver: new DefaultAgentCardResolver({}),
  }),
);
const agent = `${base}/a2a/Echo/alice/js-bearer/`;
const send = (value) => ({ message: { messageId: crypto.randomUUID(), role: Role.ROLE_USER, parts: [{ content: { $case: 'text', value } }] } });

const card = await new DefaultAgentCardResolver({}).resolve(agent);
const oidc = card.securitySchemes?.oidc;
check(JSON.stringify(oidc).includes(`${issuer}/.well-known/openid-configuration`), 'the card names the provider', card.securitySchemes);

const alice = await factory(good).createFromUrl(agent);
const task = await alice.sendMessage(send('hello with a token'));
check(task?.status?.state === TaskState.TASK_STATE_COMPLETED, 'a send with a good token', task);

for (const [i, token] of bad.entries()) {
  const c = await factory(token).createFromUrl(agent);
  try {
    await c.sendMessage(send('hi'));
    check(false, `bad token ${i} refused`, 'the send succeeded');
  } catch (e) {
    check(/unauthenticated|401|bearer token refused/i.test(`${e.constructor.name} ${e.message}`), `bad token ${i} refused`, e.message);
  }
}
const again = await alice.sendMessage(send('still served'));
check(again?.status?.state === TaskState.TASK_STATE_COMPLETED, 'a good token after the bad ones', again);
console.log('all ok');

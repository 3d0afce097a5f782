// An independent A2A client of an agentsilo silo: the official JavaScript
// SDK (@a2a-js/sdk, pinned in package.json and package-lock.json) drives a
// real silo through its spec 1.0 JSON-RPC and HTTP+JSON transports and its
// legacy 0.3 JSON-RPC transport: agent cards, send, stream, get, cancel,
// input-required, and the error codes.
//
//   node client.mjs BASE_URL API_KEY
//
// BASE_URL is the silo's A2A address (http://127.0.0.1:9090); the silo
// authenticates with API keys, and API_KEY is the key of principal alice.
// It prints "ok <check>" per check and exits 1 at the first failure.
// tests/a2a's TestJSClient runs it against a silo process.

import {
  ClientFactory,
  ClientFactoryOptions,
  DefaultAgentCardResolver,
  JsonRpcTransportFactory,
  RestTransportFactory,
} from '@a2a-js/sdk/client';
import { TaskNotCancelableError, TaskNotFoundError } from '@a2a-js/sdk/errors';
import { Role, TaskState } from '@a2a-js/sdk';

const [base, apiKey] = process.argv.slice(2);
if (!base || !apiKey) {
  console.error('usage: node client.mjs BASE_URL API_KEY');
  process.exit(2);
}

function check(cond, what, detail) {
  if (!cond) {
    throw new Error(`${what}: ${detail === undefined ? '' : JSON.stringify(detail)}`);
  }
  console.log(`ok ${what}`);
}

// fetchWith sends the API key (or nothing) with every request.
function fetchWith(key) {
  return (input, init = {}) => {
    const headers = new Headers(init.headers || {});
    if (key) headers.set('x-api-key', key);
    return fetch(input, { ...init, headers });
  };
}

function factory(key, { legacy = false, prefer } = {}) {
  const fetchImpl = fetchWith(key);
  const compat = legacy ? { legacyCompat: { enabled: true } } : {};
  return new ClientFactory(
    ClientFactoryOptions.createFrom(ClientFactoryOptions.default, {
      transports: [new JsonRpcTransportFactory({ fetchImpl, ...compat }), new RestTransportFactory({ fetchImpl, ...compat })],
      cardResolver: new DefaultAgentCardResolver({ fetchImpl, ...compat }),
      ...(prefer ? { preferredTransports: [prefer] } : {}),
    }),
  );
}

const textPart = (value) => ({ content: { $case: 'text', value } });
const message = (value, extra = {}) => ({ messageId: crypto.randomUUID(), role: Role.ROLE_USER, parts: [textPart(value)], ...extra });
const send = (value, extra) => ({ message: message(value, extra) });
const partsText = (parts = []) => parts.map((p) => (p.content?.$case === 'text' ? p.content.value : '')).join('');
const artifactsText = (task) => (task.artifacts || []).map((a) => partsText(a.parts)).join('');
const statusText = (task) => partsText(task.status?.message?.parts);

// event unwraps a StreamResponse into [kind, value].
function event(ev) {
  const p = ev.payload ?? ev.result ?? ev;
  if (p.$case) return [p.$case, p.value];
  for (const k of ['task', 'message', 'statusUpdate', 'artifactUpdate']) {
    if (p[k]) return [k, p[k]];
  }
  return ['unknown', p];
}

async function expectError(promise, cls, what) {
  try {
    const r = await promise;
    check(false, what, r);
  } catch (e) {
    if (e.message?.startsWith(what)) throw e;
    check(e instanceof cls, what, `${e.constructor.name}: ${e.message}`);
  }
}

async function run(label, opts) {
  const agent = (type, alias) => `${base}/a2a/${type}/alice/${alias}-${label}/`;
  const f = factory(apiKey, opts);

  // The card: the type's metadata, the endpoint's interfaces, the
  // security schemes.
  const card = await new DefaultAgentCardResolver({ fetchImpl: fetchWith(null) }).resolve(agent('Skilled', 's'));
  check(card.name === `Skilled:alice:s-${label}`, `${label} card name`, card.name);
  check(card.skills.map((s) => s.id).join(',') === 'plan,book' && card.skills[0].tags.includes('travel'), `${label} card skills`, card.skills);
  check(card.supportedInterfaces.length === 4 && card.capabilities.streaming &&
    card.supportedInterfaces[3].protocolBinding === 'GRPC' && card.supportedInterfaces[3].tenant === `Skilled:alice:s-${label}`,
    `${label} card interfaces`, card.supportedInterfaces);
  check(Object.keys(card.securitySchemes || {}).sort().join(',') === 'apiKey,bearer', `${label} card security`, card.securitySchemes);

  // Without a key: unauthenticated.
  const anon = await factory(null, opts).createFromUrl(agent('Echo', 'e'));
  try {
    await anon.sendMessage(send('hi'));
    check(false, `${label} unauthenticated`, 'a send without a key succeeded');
  } catch (e) {
    check(/unauthenticated|401|no API key/i.test(`${e.constructor.name} ${e.message}`), `${label} unauthenticated`, e.message);
  }

  // Send, get.
  const echo = await f.createFromUrl(agent('Echo', 'e'));
  const task = await echo.sendMessage(send('hello from js'));
  check(task.status.state === TaskState.TASK_STATE_COMPLETED && artifactsText(task) === 'hello from js', `${label} send`, task);
  const got = await echo.getTask({ id: task.id, historyLength: 1 });
  check(got.id === task.id && got.status.state === TaskState.TASK_STATE_COMPLETED, `${label} get`, got);

  // Stream: working updates and artifact chunks, then completed.
  const stream = await f.createFromUrl(agent('Stream', 'st'));
  const kinds = [];
  let chunks = '';
  let last;
  for await (const ev of stream.sendMessageStream(send('2'))) {
    const [kind, v] = event(ev);
    kinds.push(kind);
    if (kind === 'artifactUpdate') chunks += partsText(v.artifact.parts);
    if (kind === 'statusUpdate' || kind === 'task') last = v.status.state;
  }
  check(kinds[0] === 'task' && kinds.includes('statusUpdate') && chunks === 'chunk 1;chunk 2;streamed 2' && last === TaskState.TASK_STATE_COMPLETED,
    `${label} stream`, { kinds, chunks, last });

  // input-required, then the answer on the same task.
  const iv = await f.createFromUrl(agent('Interview', 'i'));
  const q = await iv.sendMessage(send('hi'));
  check(q.status.state === TaskState.TASK_STATE_INPUT_REQUIRED && statusText(q) === 'what is your name?', `${label} input-required`, q);
  const a = await iv.sendMessage(send('name Jo', { taskId: q.id, contextId: q.contextId }));
  check(a.id === q.id && artifactsText(a) === `hello Jo (context ${q.contextId}, turn 2)`, `${label} input answered`, a);

  // Cancel a running turn.
  const block = await f.createFromUrl(agent('Block', 'b'));
  let id;
  let final;
  const it = block.sendMessageStream(send('wait'));
  for await (const ev of it) {
    const [kind, v] = event(ev);
    if (kind === 'statusUpdate' && partsText(v.status.message?.parts) === 'started' && !id) {
      id = v.taskId;
      const c = await block.cancelTask({ id });
      check(c.status.state === TaskState.TASK_STATE_CANCELED, `${label} cancel`, c);
    }
    if (kind === 'statusUpdate' || kind === 'task') final = v.status.state;
  }
  check(final === TaskState.TASK_STATE_CANCELED, `${label} stream ends canceled`, final);

  // Errors: the spec's codes.
  await expectError(echo.getTask({ id: 'no-such-task' }), TaskNotFoundError, `${label} task not found`);
  await expectError(echo.cancelTask({ id: task.id }), TaskNotCancelableError, `${label} task not cancelable`);
  const fail = await f.createFromUrl(agent('Fail', 'f'));
  const rej = await fail.sendMessage(send('InvalidArgument'));
  check(rej.status.state === TaskState.TASK_STATE_REJECTED && statusText(rej).startsWith('InvalidArgument: '), `${label} rejected`, rej);
  const failed = await fail.sendMessage(send('Internal'));
  check(failed.status.state === TaskState.TASK_STATE_FAILED && statusText(failed).startsWith('Internal: '), `${label} failed`, failed);
}

// The legacy 0.3 transport: the 0.3 card at the 0.3 endpoint, translated
// by the resolver, and the v0.3 JSON-RPC transport.
async function runLegacy() {
  const label = 'v0.3';
  const f = factory(apiKey, { legacy: true });
  const url = (type, alias) => `${base}/a2a/${type}/alice/${alias}-v03/v0.3/`;
  const echo = await f.createFromUrl(url('Echo', 'e'));
  const task = await echo.sendMessage(send('hello 0.3'));
  check(artifactsText(task) === 'hello 0.3' && task.status.state === TaskState.TASK_STATE_COMPLETED, `${label} send`, task);
  const got = await echo.getTask({ id: task.id });
  check(got.status.state === TaskState.TASK_STATE_COMPLETED, `${label} get`, got);
  const stream = await f.createFromUrl(url('Stream', 'st'));
  let chunks = '';
  let last;
  for await (const ev of stream.sendMessageStream(send('1'))) {
    const [kind, v] = event(ev);
    if (kind === 'artifactUpdate') chunks += partsText(v.artifact.parts);
    if (kind === 'statusUpdate' || kind === 'task') last = v.status.state;
  }
  check(chunks === 'chunk 1;streamed 1' && last === TaskState.TASK_STATE_COMPLETED, `${label} stream`, { chunks, last });
  const block = await f.createFromUrl(url('Block', 'b'));
  let final;
  for await (const ev of block.sendMessageStream(send('wait'))) {
    const [kind, v] = event(ev);
    if (kind === 'statusUpdate' && partsText(v.status.message?.parts) === 'started') {
      const c = await block.cancelTask({ id: v.taskId });
      check(c.status.state === TaskState.TASK_STATE_CANCELED, `${label} cancel`, c);
    }
    if (kind === 'statusUpdate' || kind === 'task') final = v.status.state;
  }
  check(final === TaskState.TASK_STATE_CANCELED, `${label} stream ends canceled`, final);
  await expectError(echo.getTask({ id: 'no-such-task' }), TaskNotFoundError, `${label} task not found`);
  await expectError(echo.cancelTask({ id: task.id }), TaskNotCancelableError, `${label} task not cancelable`);
}

try {
  await run('jsonrpc', { prefer: 'JSONRPC' });
  await run('rest', { prefer: 'HTTP+JSON' });
  await runLegacy();
  console.log('all ok');
} catch (e) {
  console.error(`FAIL ${e.stack || e}`);
  process.exit(1);
}

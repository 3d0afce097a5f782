// The official JavaScript SDK continues a model agent's conversation by
// its contextId: each context is a conversation of its own, and the same
// context goes on with it.
//
//   node conversation.mjs BASE_URL AGENT_PATH
//
// BASE_URL is the silo's A2A address; AGENT_PATH the agent's path
// (Chat/dev/main). The agent's model answers with the user's messages it
// was sent, joined by " | ". It prints "ok <check>" per check and exits 1
// at the first failure. tests/a2a's TestJSConversation runs it.

import { ClientFactory, ClientFactoryOptions, JsonRpcTransportFactory, DefaultAgentCardResolver } from '@a2a-js/sdk/client';
import { Role, TaskState } from '@a2a-js/sdk';

const [base, agent] = process.argv.slice(2);
if (!base || !agent) {
  console.error('usage: node conversation.mjs BASE_URL AGENT_PATH');
  process.exit(2);
}

function check(cond, what, detail) {
  if (!cond) {
    throw new Error(`${what}: ${detail === undefined ? '' : JSON.stringify(detail)}`);
  }
  console.log(`ok ${what}`);
}

const factory = new ClientFactory(
  ClientFactoryOptions.createFrom(ClientFactoryOptions.default, {
    transports: [new JsonRpcTransportFactory({})],
    cardResolver: new DefaultAgentCardResolver({}),
  }),
);
const client = await factory.createFromUrl(`${base}/a2a/${agent}/`);

// say sends text in contextId and returns the completed task's answer.
async function say(text, contextId) {
  const task = await client.sendMessage({
    message: { messageId: crypto.randomUUID(), role: Role.ROLE_USER, contextId, parts: [{ content: { $case: 'text', value: text } }] },
  });
  if (task?.status?.state !== TaskState.TASK_STATE_COMPLETED) {
    throw new Error(`${text}: the task did not complete: ${JSON.stringify(task)}`);
  }
  check(task.contextId === contextId, `${text}: the task is in context ${contextId}`, task.contextId);
  return task.artifacts.flatMap((a) => a.parts).map((p) => (p.content?.$case === 'text' ? p.content.value : '')).join('');
}

const a = `js-a-${crypto.randomUUID()}`;
const b = `js-b-${crypto.randomUUID()}`;
check((await say('one', a)) === 'one', 'a first turn in context a');
check((await say('two', b)) === 'two', 'context b is a conversation of its own');
check((await say('three', a)) === 'one | three', 'context a goes on with its conversation');
console.log('all ok');

// Content labels over A2A with the official JavaScript SDK (@a2a-js/sdk,
// pinned): a message whose part claims tool-output reaches the agent as
// tool-output from outside the cluster, and the agent it asks on another
// silo too; the reply's parts carry the label in their metadata
// (agentsilo.label, agentsilo.outside); a part claiming a label above
// agent-message is taken as agent-message. See docs/trust.md.
//
//   node labels.mjs AGENT_URL VIA
//
// AGENT_URL is the A2A URL of a LabelProbe agent (a test agent that says
// which label it got), VIA the address it asks on the way. It prints
// "ok <check>" per check and exits 1 at the first failure. tests'
// TestLabelsAcrossSilos runs it.

import { ClientFactory } from '@a2a-js/sdk/client';
import { Role, TaskState } from '@a2a-js/sdk';

const [agentURL, via] = process.argv.slice(2);
if (!agentURL || !via) {
  console.error('usage: node labels.mjs AGENT_URL VIA');
  process.exit(2);
}

function check(cond, what, detail) {
  if (!cond) {
    throw new Error(`${what}: ${detail === undefined ? '' : JSON.stringify(detail)}`);
  }
  console.log(`ok ${what}`);
}

const send = (text, label) => ({
  message: {
    messageId: crypto.randomUUID(),
    role: Role.ROLE_USER,
    parts: [{ content: { $case: 'text', value: text }, metadata: label ? { 'agentsilo.label': label } : undefined }],
  },
});
const parts = (task) => (task.artifacts || []).flatMap((a) => a.parts || []);
const text = (task) => parts(task).map((p) => (p.content?.$case === 'text' ? p.content.value : '')).join('');

async function main() {
  const client = await new ClientFactory().createFromUrl(agentURL);

  const task = await client.sendMessage(send(`via ${via}`, 'tool-output'));
  check(task.status.state === TaskState.TASK_STATE_COMPLETED, 'completed', task);
  check(/ got tool-output outside \| .* got tool-output outside \(reply tool-output outside\)$/.test(text(task)), 'the agents got tool-output from outside', text(task));
  const meta = parts(task)[0]?.metadata || {};
  check(meta['agentsilo.label'] === 'tool-output' && meta['agentsilo.outside'] === true, 'the reply part carries its label', meta);

  const plain = await client.sendMessage(send('hello'));
  check(/ got agent-message outside$/.test(text(plain)), 'no claim: agent-message from outside', text(plain));

  const raised = await client.sendMessage(send('hello', 'system'));
  check(/ got agent-message outside$/.test(text(raised)), 'a claim of system counts for nothing', text(raised));
  console.log('all ok');
}

main().catch((e) => {
  console.error(e.stack || String(e));
  process.exit(1);
});

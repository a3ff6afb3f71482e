// A flow run's graph (docs/flows.md) drawn from the pinned IR as nested
// boxes: a seq is a vertical list, a fan-out, branch or try puts its
// parts side by side, a loop is a box around its body. Each IR node is one
// box (`.gnode`, `data-pointer` its JSON pointer) coloured by the state of
// its instances: every instance whose `pointer` is the box's, aggregated
// (a fan-out body with five items shows "3 passed · 2 running"). A step's
// box lists its tries, each linking to the task it ran.

import { h } from './dom.js';

/** Instance states in the order a summary lists them. */
const ORDER = ['running', 'waiting', 'failed', 'passed', 'cancelled'];

/**
 * The instances of `nodes` grouped by pointer: `{statuses: {status: n},
 * instances: [node]}` per pointer.
 */
export function byPointer(nodes) {
  const groups = new Map();
  for (const node of nodes || []) {
    let group = groups.get(node.pointer);
    if (!group) {
      group = { statuses: {}, instances: [] };
      groups.set(node.pointer, group);
    }
    group.statuses[node.status] = (group.statuses[node.status] || 0) + 1;
    group.instances.push(node);
  }
  return groups;
}

/**
 * One state for a group of instances: the first of running, waiting,
 * failed, passed, cancelled that any instance is in; `pending` when none
 * was reached.
 */
export function aggregate(group) {
  if (!group) return 'pending';
  return ORDER.find((status) => group.statuses[status]) || 'pending';
}

/** "3 passed · 2 running", in ORDER; "not reached" when none was. */
export function summary(group) {
  if (!group) return 'not reached';
  const parts = ORDER.filter((s) => group.statuses[s]).map((s) => `${group.statuses[s]} ${s}`);
  return parts.join(' · ') || 'not reached';
}

/** What a box's head says after its kind. */
function label(node) {
  switch (node.kind) {
    case 'step': return node.name ? `${node.name} (${node.ref})` : node.ref;
    case 'wait': return node.name;
    case 'call': return node.flow;
    case 'fanout': return `join ${node.join || 'all'}${node.concurrency ? `, ${node.concurrency} at once` : ''}`;
    case 'loop': return node.max ? `at most ${node.max}` : '';
    case 'merge': return `${node.strategy} (${node.ref})`;
    default: return '';
  }
}

/** The longest output summary shown on a try. */
const OUTPUT_CHARS = 160;

/** A try's git changes as `+12 −3 · 2 files · branch`. */
function diffStat(changes) {
  if (!changes || typeof changes !== 'object') return null;
  const files = Array.isArray(changes.files) ? changes.files.length : 0;
  const parts = [`+${changes.insertions ?? 0} −${changes.deletions ?? 0}`,
    `${files}${changes.files_truncated ? '+' : ''} file${files === 1 ? '' : 's'}`];
  if (changes.branch) parts.push(changes.branch);
  return h('div', { class: 'try-diff' }, parts.join(' · '));
}

/** A try's output in one line: a string as it is, anything else as JSON. */
function outputLine(output) {
  if (output === undefined || output === null) return null;
  const text = typeof output === 'string' ? output : JSON.stringify(output);
  const shown = text.length > OUTPUT_CHARS ? `${text.slice(0, OUTPUT_CHARS)}…` : text;
  return h('div', { class: 'try-output', title: text.slice(0, 4096) }, shown);
}

/** A step's tries, across its instances, each with its task link, its
 * output in one line and its diff stat when it asked for its changes. */
function tries(group) {
  const all = [];
  for (const instance of group ? group.instances : []) {
    for (const t of instance.tries || []) all.push({ instance, t });
  }
  if (all.length === 0) return null;
  return h('ul', { class: 'tries' }, all.map(({ instance, t }) => h('li', { dataset: { key: t.key } },
    t.task_id ? h('a', { href: `#/task/${t.task_id}`, class: 'try-task' }, t.task_id.slice(-8)) : 'no task',
    ' ',
    h('span', { class: 'muted' }, t.key),
    t.reason ? h('span', { class: 'reason' }, ` ${t.reason}`) : null,
    instance.reason && !t.reason ? h('span', { class: 'reason' }, ` ${instance.reason}`) : null,
    diffStat(t.changes),
    outputLine(t.output))));
}

/** A column of parts side by side, each titled. */
function columns(parts, groups) {
  return h('div', { class: 'gcols' }, parts.map(([title, child, pointer]) => h('div', { class: 'gcol' },
    h('div', { class: 'gcol-title muted' }, title),
    box(child, pointer, groups))));
}

/** The box of IR node `node` at `pointer`, its parts inside. */
function box(node, pointer, groups) {
  if (!node || typeof node !== 'object') return h('div', { class: 'gnode', dataset: { status: 'pending' } }, '?');
  const group = groups.get(pointer);
  const status = aggregate(group);
  const reasons = group ? group.instances.filter((i) => i.reason).map((i) => i.reason) : [];
  const head = h('div', { class: 'ghead' },
    h('span', { class: 'gkind' }, node.kind),
    ' ',
    h('span', { class: 'glabel' }, label(node)),
    h('span', { class: 'gstate', dataset: { status } }, summary(group)));
  let inside = null;
  switch (node.kind) {
    case 'seq':
      inside = h('div', { class: 'gseq' },
        (node.children || []).map((child, i) => box(child, `${pointer}/children/${i}`, groups)));
      break;
    case 'fanout':
      inside = columns([['each item', node.body, `${pointer}/body`]], groups);
      break;
    case 'branch':
      inside = columns([['then', node.then, `${pointer}/then`], ['else', node.else, `${pointer}/else`]], groups);
      break;
    case 'try':
      inside = columns([['try', node.body, `${pointer}/body`], ['catch', node.catch, `${pointer}/catch`]], groups);
      break;
    case 'loop':
      inside = h('div', { class: 'gloop' }, box(node.body, `${pointer}/body`, groups));
      break;
    case 'step':
    case 'merge':
      inside = tries(group);
      break;
    default:
      inside = reasons.length ? h('div', { class: 'reason' }, reasons.join('; ')) : null;
  }
  return h('div', { class: `gnode g-${node.kind}`, dataset: { pointer, kind: node.kind, status } }, head, inside);
}

/** The graph of `flow` (the run's `graph`) with the states of `nodes`. */
export function drawGraph(flow, nodes) {
  const groups = byPointer(nodes);
  return h('div', { class: 'graph', id: 'run-graph' }, box(flow && flow.body, '/body', groups));
}

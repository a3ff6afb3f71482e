// Flow runs (docs/flows.md): the list (`#/runs?status=…&flow=…`, from `GET
// /v1/runs`) and one run (`#/run/R-…`, from `GET /v1/runs/{id}`): its
// graph with each node's state (graph.js), each step's tries linking to
// their tasks, the open waits with a JSON answer box (`POST
// /v1/runs/{id}/waits/{key}`; empty until typed into, and only for who may
// answer: the admin and the run's session), Cancel (`POST
// /v1/runs/{id}/cancel`, confirmed), and the run's result or error. Both read again when the event feed brings a
// `run_changed` (for the run page, one of its own run), at most five
// times a second. The daemon decides who may answer or cancel; a refusal
// shows its message.

import * as api from './api.js';
import { onEvent, session } from './app.js';
import { h, replace, show, time } from './dom.js';
import { drawGraph } from './graph.js';

const STATUSES = ['running', 'waiting', 'passed', 'failed', 'cancelled'];
const TERMINAL = new Set(['passed', 'failed', 'cancelled']);
/** Reads coalesced after a `run_changed`, in milliseconds. */
const SETTLE_MS = 200;

/** How long ago `ms` was, short. */
function since(ms) {
  const s = Math.max(0, Math.round((Date.now() - ms) / 1000));
  if (s < 60) return `${s} s ago`;
  if (s < 3600) return `${Math.floor(s / 60)} min ago`;
  if (s < 86400) return `${Math.floor(s / 3600)} h ago`;
  return `${Math.floor(s / 86400)} d ago`;
}

/**
 * Whether the signed-in credential may answer `run`'s waits and cancel it:
 * the admin and the session that started it, as the daemon's rule is
 * (docs/security.md: `answer` on a run's wait only by its owner, the admin
 * or the wait's own token; an observer neither answers nor cancels). The
 * daemon checks anyway.
 */
function mayAct(run) {
  const caller = session.caller || {};
  return caller.role === 'admin' || (Boolean(caller.sid) && run.session === caller.sid);
}

/**
 * Calls `load` again shortly after each `run_changed` that `wanted`
 * accepts; answers the unsubscribe.
 */
function reloadOnChange(wanted, load, error) {
  let timer = null;
  const unsubscribe = onEvent((record) => {
    const event = record.event || {};
    if (event.kind !== 'run_changed' || !wanted(event) || timer) return;
    timer = setTimeout(() => {
      timer = null;
      load().catch((e) => replace(error, e.message));
    }, SETTLE_MS);
  });
  return () => {
    unsubscribe();
    if (timer) clearTimeout(timer);
  };
}

/** The run list, filtered by status and flow. */
export function runsView(root, params) {
  const status = params.get('status') || '';
  const flow = params.get('flow') || '';
  const error = h('p', { class: 'error', role: 'alert', id: 'runs-error' });
  const body = h('div', { id: 'runs' });
  const statusFilter = h('select', { id: 'run-status', 'aria-label': 'status' },
    h('option', { value: '' }, 'every status'),
    STATUSES.map((s) => h('option', { value: s }, s)));
  statusFilter.value = status;
  const flowFilter = h('input', { id: 'run-flow', placeholder: 'flow', value: flow, 'aria-label': 'flow' });
  const go = () => {
    const query = new URLSearchParams();
    if (statusFilter.value) query.set('status', statusFilter.value);
    if (flowFilter.value.trim()) query.set('flow', flowFilter.value.trim());
    const text = query.toString();
    location.hash = text ? `#/runs?${text}` : '#/runs';
  };
  statusFilter.addEventListener('change', go);
  flowFilter.addEventListener('change', go);
  replace(root,
    h('h1', {}, 'Runs'),
    h('div', { class: 'filters' }, statusFilter, flowFilter),
    error, body);

  let stopped = false;
  async function load() {
    const query = new URLSearchParams({ limit: '100' });
    if (status) query.set('status', status);
    if (flow) query.set('flow', flow);
    const list = await api.get(`/v1/runs?${query}`);
    if (stopped) return;
    error.textContent = '';
    replace(body, list.runs.length === 0
      ? h('p', { class: 'muted', id: 'runs-none' }, 'No runs.')
      : h('table', {},
        h('thead', {}, h('tr', {}, ['run', 'flow', 'status', 'since', 'updated', 'error'].map((c) => h('th', {}, c)))),
        h('tbody', { id: 'run-rows' }, list.runs.map((r) => h('tr', { dataset: { id: r.id } },
          h('td', { class: 'id' }, h('a', { href: `#/run/${r.id}` }, r.id.slice(-8))),
          h('td', { class: 'flow' }, r.flow),
          h('td', { class: 'status', dataset: { status: r.status } }, r.status),
          h('td', { class: 'time', title: time(r.created_ms) }, since(r.created_ms)),
          h('td', { class: 'time', title: time(r.updated_ms) }, since(r.updated_ms)),
          h('td', { class: 'reason' }, r.error || ''))))));
  }

  const unsubscribe = reloadOnChange(() => true, load, error);
  load().catch((e) => replace(error, e.message));
  return () => {
    stopped = true;
    unsubscribe();
  };
}

/** An open wait's heading, prompt and schema. */
function waitHead(wait) {
  return [
    h('h3', {}, 'Wait ', h('code', {}, wait.name),
      h('span', { class: 'muted' }, ` open since ${time(wait.opened_ms)}`,
        wait.deadline_ms ? `, until ${time(wait.deadline_ms)}` : '')),
    wait.prompt !== undefined ? h('pre', { class: 'wait-prompt' }, show(wait.prompt)) : null,
    wait.schema !== undefined
      ? h('details', {}, h('summary', { class: 'muted' }, 'answer schema'), h('pre', {}, show(wait.schema)))
      : null,
  ];
}

/** An open wait shown to a caller who may not answer it: no answer box. */
function waitPanel(wait) {
  return h('section', { class: 'panel wait', dataset: { wait: wait.name, key: wait.key } },
    waitHead(wait),
    h('p', { class: 'muted wait-who' }, 'Answered by the session that started the run, or the admin.'));
}

/**
 * One open wait: its prompt, schema, a JSON answer box and its button.
 * The box starts empty: an answer is typed, never one click away.
 */
function waitForm(run, wait, answered, error) {
  const answer = h('textarea', { class: 'wait-answer', rows: '3', cols: '60', spellcheck: 'false',
    placeholder: 'a JSON value, e.g. true or {"approve": true}',
    'aria-label': `answer to ${wait.name}` });
  const status = h('span', { class: 'error wait-error', role: 'alert' });
  const submit = h('button', { type: 'submit', class: 'wait-submit' }, 'Answer');
  const form = h('form', { class: 'panel wait', dataset: { wait: wait.name, key: wait.key } },
    waitHead(wait),
    h('p', {}, answer),
    h('p', {}, submit, ' ', status));
  form.addEventListener('submit', async (event) => {
    event.preventDefault();
    status.textContent = '';
    if (answer.value.trim() === '') {
      status.textContent = 'type an answer first: a JSON value';
      answer.focus();
      return;
    }
    let value;
    try {
      value = JSON.parse(answer.value);
    } catch (e) {
      status.textContent = `not JSON: ${e.message}`;
      return;
    }
    submit.disabled = true;
    try {
      await api.post(`/v1/runs/${encodeURIComponent(run.id)}/waits/${encodeURIComponent(wait.key)}`, { value });
      await answered();
    } catch (e) {
      status.textContent = e.message;
    } finally {
      submit.disabled = false;
    }
    error.textContent = '';
  });
  return form;
}

/** One run: header, actions, result or error, waits, graph, input. */
export function runView(root, id) {
  const error = h('p', { class: 'error', role: 'alert', id: 'run-error' });
  const head = h('div', { id: 'run-summary' });
  const actions = h('p', { class: 'actions', id: 'run-actions' });
  const waits = h('div', { id: 'run-waits' });
  const outcome = h('div', { id: 'run-outcome' });
  const graph = h('div', { id: 'run-graph-box' });
  const input = h('pre', { id: 'run-input' });
  replace(root,
    h('p', {}, h('a', { href: '#/runs' }, '« runs')),
    h('h1', {}, 'Run ', h('code', { id: 'run-id' }, id)),
    actions, error, head, outcome, waits,
    h('h2', {}, 'Graph'), graph,
    h('details', { class: 'raw' }, h('summary', {}, 'Input'), input));

  let stopped = false;
  // An answer box being typed into is kept across reloads.
  const typing = () => document.activeElement && document.activeElement.closest
    && document.activeElement.closest('#run-waits form');

  /** Reads the run and redraws; `force` redraws a wait being typed into too. */
  async function load(force = false) {
    const run = await api.get(`/v1/runs/${encodeURIComponent(id)}`);
    if (stopped) return;
    replace(head, h('dl', {},
      h('dt', {}, 'flow'), h('dd', { id: 'run-flow' }, run.flow, ' ', h('code', { class: 'muted' }, run.flow_hash)),
      h('dt', {}, 'status'), h('dd', { id: 'run-status', class: 'status', dataset: { status: run.status } }, run.status),
      h('dt', {}, 'started'), h('dd', {}, time(run.created_ms)),
      h('dt', {}, 'updated'), h('dd', {}, time(run.updated_ms))));
    replace(input, show(run.input));
    const acts = mayAct(run);
    replace(actions, acts && !TERMINAL.has(run.status)
      ? h('button', { type: 'button', class: 'danger', id: 'run-cancel', onclick: () => cancel() }, 'Cancel run')
      : null);
    const open = (run.waits || []).filter((w) => w.open);
    if (force || !typing()) {
      replace(waits, open.length === 0 ? null : [h('h2', {}, 'Open waits'),
        open.map((w) => (acts ? waitForm(run, w, () => load(true), error) : waitPanel(w)))]);
    }
    replace(outcome,
      run.result !== undefined ? [h('h2', {}, 'Result'), h('pre', { id: 'run-result' }, show(run.result))] : null,
      run.error ? [h('h2', {}, 'Error'), h('pre', { id: 'run-failure', class: 'error' }, run.error)] : null);
    replace(graph, drawGraph(run.graph, run.nodes));
  }

  async function cancel() {
    if (!window.confirm(`Cancel run ${id}?`)) return;
    try {
      await api.post(`/v1/runs/${encodeURIComponent(id)}/cancel`, {});
      await load(true);
    } catch (e) {
      replace(error, e.message);
    }
  }

  const unsubscribe = reloadOnChange((event) => event.run_id === id, () => load(), error);
  load().catch((e) => replace(error, e.message));
  return () => {
    stopped = true;
    unsubscribe();
  };
}

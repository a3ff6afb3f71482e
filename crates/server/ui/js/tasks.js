// The task list: filters and the page cursor live in the URL
// (`#/tasks?status=&agent=&limit=&after=`); the first page takes new tasks
// live from the event feed, and every listed row follows its status.

import * as api from './api.js';
import { onEvent } from './app.js';
import { h, replace, time } from './dom.js';

const STATUSES = ['', 'queued', 'running', 'pass', 'blocked', 'failed', 'cancelled'];
const TERMINAL = new Set(['pass', 'blocked', 'failed', 'cancelled']);
/** A live first page keeps at most this many rows. */
const MAX_ROWS = 1000;
/** New tasks are fetched at most this often, in one list request. */
const REFRESH_MS = 250;

function link(params) {
  const query = new URLSearchParams();
  for (const [key, value] of Object.entries(params)) if (value) query.set(key, value);
  const text = query.toString();
  return '#/tasks' + (text ? '?' + text : '');
}

export function tasksView(root, params) {
  const filter = {
    status: params.get('status') || '',
    agent: params.get('agent') || '',
    limit: params.get('limit') || '',
    after: params.get('after') || '',
  };
  const rows = new Map();
  const body = h('tbody', { id: 'task-rows' });
  const count = h('span', { id: 'task-count', class: 'muted' });
  const pager = h('p', { class: 'pager' });
  const error = h('p', { class: 'error', role: 'alert' });

  const status = h('select', { id: 'filter-status', name: 'status' },
    STATUSES.map((s) => h('option', { value: s, selected: s === filter.status }, s || 'any status')));
  const agent = h('input', { id: 'filter-agent', name: 'agent', placeholder: 'agent', value: filter.agent });
  const form = h('form', {
    class: 'filters',
    onsubmit: (event) => {
      event.preventDefault();
      location.hash = link({ status: status.value, agent: agent.value.trim(), limit: filter.limit });
    },
  }, status, agent, h('button', { type: 'submit' }, 'Filter'));

  replace(root,
    h('h1', {}, 'Tasks ', count),
    form, error,
    h('table', { class: 'tasks' },
      h('thead', {}, h('tr', {}, ['task', 'agent', 'status', 'attempt', 'prompt', 'created'].map((c) => h('th', {}, c)))),
      body),
    pager);

  function row(task) {
    const cells = {
      status: h('td', { class: 'status', dataset: { status: task.status } }, task.status),
      attempt: h('td', { class: 'num' }, String(task.attempt)),
    };
    const tr = h('tr', { dataset: { id: task.id } },
      h('td', { class: 'id' }, h('a', { href: `#/task/${task.id}` }, task.id)),
      h('td', {}, task.agent),
      cells.status,
      cells.attempt,
      h('td', { class: 'prompt' }, task.prompt.length > 120 ? task.prompt.slice(0, 120) + '…' : task.prompt),
      h('td', { class: 'time' }, time(task.created_ms)));
    return { tr, cells, task };
  }

  function setStatus(entry, value, attempt) {
    entry.cells.status.textContent = value;
    entry.cells.status.dataset.status = value;
    if (attempt !== undefined) entry.cells.attempt.textContent = String(attempt);
  }

  function matches(task) {
    return (!filter.status || task.status === filter.status) && (!filter.agent || task.agent === filter.agent);
  }

  // Newest first: ids are time-ordered, so a new row goes before the first
  // row with a smaller id.
  function insert(task) {
    if (rows.has(task.id) || !matches(task)) return;
    const entry = row(task);
    rows.set(task.id, entry);
    let before = null;
    for (const tr of body.children) {
      if (tr.dataset.id < task.id) {
        before = tr;
        break;
      }
    }
    body.insertBefore(entry.tr, before);
    while (body.children.length > MAX_ROWS) {
      const last = body.lastElementChild;
      rows.delete(last.dataset.id);
      last.remove();
    }
  }

  function showCount() {
    count.textContent = `(${rows.size} shown)`;
  }

  const query = () => {
    const q = new URLSearchParams();
    if (filter.status) q.set('status', filter.status);
    if (filter.agent) q.set('agent', filter.agent);
    if (filter.limit) q.set('limit', filter.limit);
    return q;
  };

  async function load() {
    const q = query();
    if (filter.after) q.set('after', filter.after);
    const page = await api.get('/v1/tasks?' + q);
    for (const task of page.tasks) insert(task);
    showCount();
    replace(pager,
      filter.after ? h('a', { href: link({ ...filter, after: '' }) }, '« newest') : null,
      page.next ? h('a', { id: 'next-page', href: link({ ...filter, after: page.next }) }, 'older »') : null);
  }

  // New tasks arrive as ids; their rows come from one list read per
  // REFRESH_MS, merged by id, so a burst costs one request.
  let pending = false;
  let timer = null;
  async function refresh() {
    timer = null;
    pending = false;
    try {
      const page = await api.get('/v1/tasks?' + query());
      for (const task of page.tasks) insert(task);
      showCount();
    } catch (e) {
      error.textContent = e.message;
    }
  }

  const live = !filter.after;
  const unsubscribe = onEvent((record) => {
    const event = record.event;
    if (event.kind === 'task_created' && live) {
      if (!pending) {
        pending = true;
        timer = setTimeout(refresh, REFRESH_MS);
      }
      return;
    }
    const entry = rows.get(event.task_id);
    if (!entry) return;
    if (event.kind === 'attempt_started') setStatus(entry, 'running', event.attempt);
    else if (event.kind === 'task_queued' && !TERMINAL.has(entry.cells.status.textContent)) setStatus(entry, 'queued');
    else if (event.kind === 'task_finished') setStatus(entry, event.status);
  });

  load().catch((e) => {
    error.textContent = e.message;
  });

  return () => {
    unsubscribe();
    if (timer) clearTimeout(timer);
  };
}

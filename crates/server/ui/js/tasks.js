// The task list: filters and the page cursor live in the URL
// (`#/tasks?status=&agent=&session=&parent=&q=&since=&until=&limit=&after=`,
// times as local `YYYY-MM-DDTHH:MM`); the first page takes new tasks live
// from the event feed, and every listed row follows its status. An
// operator session sees its own tasks only: the session filter is pinned
// to it.

import * as api from './api.js';
import { onEvent, session } from './app.js';
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
  const filter = {};
  for (const key of ['status', 'agent', 'session', 'parent', 'q', 'since', 'until', 'limit', 'after']) {
    filter[key] = params.get(key) || '';
  }
  const owner = (session.caller || {}).sid;
  if (owner) filter.session = owner;
  const rows = new Map();
  const body = h('tbody', { id: 'task-rows' });
  const count = h('span', { id: 'task-count', class: 'muted' });
  const pager = h('p', { class: 'pager' });
  const error = h('p', { class: 'error', role: 'alert' });

  const status = h('select', { id: 'filter-status', name: 'status' },
    STATUSES.map((s) => h('option', { value: s, selected: s === filter.status }, s || 'any status')));
  const input = (name, placeholder, type = 'text') =>
    h('input', { id: `filter-${name}`, name, placeholder, type, value: filter[name], title: placeholder });
  const fields = {
    agent: input('agent', 'agent'),
    session: owner ? null : input('session', 'session S-…'),
    parent: input('parent', 'parent T-…'),
    q: input('q', 'text in prompt'),
    since: input('since', 'created from', 'datetime-local'),
    until: input('until', 'created before', 'datetime-local'),
  };
  const form = h('form', {
    class: 'filters',
    onsubmit: (event) => {
      event.preventDefault();
      const chosen = { status: status.value, limit: filter.limit };
      for (const [key, field] of Object.entries(fields)) if (field) chosen[key] = field.value.trim();
      location.hash = link(chosen);
    },
  }, status, Object.values(fields).filter(Boolean), h('button', { type: 'submit' }, 'Filter'),
  h('a', { href: '#/tasks' }, 'clear'));

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

  // Newest first: ids are time-ordered, so a new row goes before the first
  // row with a smaller id.
  function insert(task) {
    // The daemon filtered the list; a row only changes status after that.
    if (rows.has(task.id)) return;
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

  // The API's query: the same filters, times as unix milliseconds.
  const query = () => {
    const q = new URLSearchParams();
    for (const key of ['status', 'agent', 'session', 'parent', 'q', 'limit']) {
      if (filter[key]) q.set(key, filter[key]);
    }
    for (const [key, name] of [['since', 'since_ms'], ['until', 'until_ms']]) {
      const ms = filter[key] ? new Date(filter[key]).getTime() : NaN;
      if (!Number.isNaN(ms)) q.set(name, String(ms));
    }
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

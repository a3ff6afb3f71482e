// The task list: filters and the page cursor live in the URL
// (`#/tasks?status=&agent=&session=&parent=&q=&since=&until=&limit=&after=`,
// times as local `YYYY-MM-DDTHH:MM`). The feed follows only what the list
// shows: the status changes of its unfinished rows (`tasks=`, the newest
// MAX_FOLLOWED), and on the first page a tick of new tasks matching the
// agent, session and parent filters at most once per TICK_MS, on which
// the page reads its first page again. An operator session sees its own
// tasks only: the session filter is pinned to it. Each row shows its
// duration (creation to finish, or so far), tokens and cost (the task's
// `usage`: its closed attempts) and the reason of a task that did not
// pass; a row that finishes while shown is read once to fill them.

import * as api from './api.js';
import { onEvent, onTick, scopeFeed, session } from './app.js';
import * as dom from './dom.js';
import { h, replace, time } from './dom.js';

const STATUSES = ['', 'queued', 'running', 'pass', 'blocked', 'failed', 'cancelled'];
const TERMINAL = new Set(['pass', 'blocked', 'failed', 'cancelled']);
const COLUMNS = ['task', 'agent', 'status', 'attempt', 'prompt', 'created', 'duration', 'tokens', 'cost', 'reason'];
/** The event kinds that change a row. */
const ROW_KINDS = ['task_queued', 'attempt_started', 'task_finished'];
/** At most this many unfinished rows are followed (the daemon's bound on `tasks=`). */
const MAX_FOLLOWED = 100;
/** A live first page hears of new tasks at most this often. */
const TICK_MS = 1000;

/** A count, short: 1540, 12.3k, 4.56M. */
function compact(n) {
  if (n < 10000) return String(n);
  if (n < 1e6) return `${(n / 1000).toFixed(n < 1e5 ? 1 : 0)}k`;
  return `${(n / 1e6).toFixed(2)}M`;
}

function link(params) {
  const query = new URLSearchParams();
  for (const [key, value] of Object.entries(params)) if (value) query.set(key, value);
  const text = query.toString();
  return '#/tasks' + (text ? '?' + text : '');
}

/**
 * The list view. `seq` is the event seq its first read joins: the feed
 * starts strictly after it.
 */
export function tasksView(root, params, seq) {
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
  const error = h('p', { class: 'error', role: 'alert', id: 'tasks-error' });

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
      h('thead', {}, h('tr', {}, COLUMNS.map((c) => h('th', {}, c)))),
      body),
    pager);

  function row(task) {
    const cells = {
      status: h('td', { class: 'status', dataset: { status: task.status } }, task.status),
      attempt: h('td', { class: 'num' }, String(task.attempt)),
      duration: h('td', { class: 'duration num' }),
      tokens: h('td', { class: 'tokens num' }),
      cost: h('td', { class: 'cost num' }),
      reason: h('td', { class: 'reason' }),
    };
    const tr = h('tr', { dataset: { id: task.id } },
      h('td', { class: 'id' }, h('a', { href: `#/task/${task.id}` }, task.id)),
      h('td', {}, task.agent),
      cells.status,
      cells.attempt,
      h('td', { class: 'prompt' }, task.prompt.length > 120 ? task.prompt.slice(0, 120) + '…' : task.prompt),
      h('td', { class: 'time' }, time(task.created_ms)),
      cells.duration, cells.tokens, cells.cost, cells.reason);
    const entry = { tr, cells, task };
    fill(entry, task);
    return entry;
  }

  // The columns read from the task itself: duration, usage, reason.
  function fill(entry, task) {
    entry.task = task;
    const { cells } = entry;
    const end = task.finished_ms || (TERMINAL.has(task.status) ? task.updated_ms : Date.now());
    cells.duration.textContent = task.created_ms ? dom.duration(Math.max(0, end - task.created_ms)) : '';
    cells.duration.title = task.finished_ms ? 'creation to finish' : 'so far';
    const u = task.usage || {};
    const tokens = (u.input_tokens || 0) + (u.output_tokens || 0);
    cells.tokens.textContent = tokens ? compact(tokens) : '';
    cells.tokens.title = tokens
      ? `${u.input_tokens || 0} in, ${u.output_tokens || 0} out, cache ${u.cache_read_tokens || 0} read, ${u.cache_write_tokens || 0} written`
      : '';
    cells.cost.textContent = typeof u.cost_usd === 'number' && u.cost_usd > 0 ? `$${u.cost_usd.toFixed(4)}` : '';
    replace(cells.reason, task.status !== 'pass' && task.reason ? task.reason : '');
  }

  // A finished row is read once more for its duration, usage and reason.
  async function refill(entry) {
    try {
      const task = await api.get(`/v1/tasks/${entry.task.id}`);
      if (!gone) fill(entry, task);
    } catch {
      // The next read of the page fills it.
    }
  }

  function setStatus(entry, value, attempt) {
    entry.cells.status.textContent = value;
    entry.cells.status.dataset.status = value;
    if (attempt !== undefined) entry.cells.attempt.textContent = String(attempt);
  }

  // Shows `tasks` (newest first, as read), keeping the row of a task
  // already shown; a row the page saw finish stays finished.
  function show(tasks) {
    const kept = new Map();
    for (const task of tasks) {
      let entry = rows.get(task.id);
      if (entry) {
        if (!TERMINAL.has(entry.cells.status.textContent)) {
          setStatus(entry, task.status, task.attempt);
          fill(entry, task);
        }
      } else entry = row(task);
      kept.set(task.id, entry);
    }
    rows.clear();
    for (const [id, entry] of kept) rows.set(id, entry);
    body.replaceChildren(...[...kept.values()].map((entry) => entry.tr));
    count.textContent = `(${rows.size} shown)`;
  }

  // The API's query: the same filters, times as unix milliseconds. A time
  // that is none is refused here, as the daemon refuses a bad filter: the
  // list says so rather than quietly listing without it.
  const query = () => {
    const q = new URLSearchParams();
    for (const key of ['status', 'agent', 'session', 'parent', 'q', 'limit']) {
      if (filter[key]) q.set(key, filter[key]);
    }
    for (const [key, name] of [['since', 'since_ms'], ['until', 'until_ms']]) {
      if (!filter[key]) continue;
      const ms = new Date(filter[key]).getTime();
      if (Number.isNaN(ms)) throw new Error(`${key}: ${filter[key]} is not a time (YYYY-MM-DDTHH:MM)`);
      q.set(name, String(ms));
    }
    return q;
  };

  const live = !filter.after;
  let gone = false;

  // The feed's scope: the rows' status changes, and the tick on a live
  // first page. With no unfinished row it takes the sessions' comings and
  // goings (rare, and no row's), since an empty `tasks=` means every task.
  function follow(from) {
    if (gone) return;
    const open = [...rows.values()]
      .filter((entry) => !TERMINAL.has(entry.cells.status.textContent))
      .slice(0, MAX_FOLLOWED)
      .map((entry) => entry.task.id);
    const q = new URLSearchParams(open.length
      ? { kinds: ROW_KINDS.join(','), tasks: open.join(',') }
      : { kinds: 'session_attached,session_detached' });
    let about = open.length ? `${ROW_KINDS.join(', ')} of ${open.length} unfinished rows` : 'no unfinished row';
    if (live) {
      q.set('tick_ms', String(TICK_MS));
      for (const key of ['agent', 'session', 'parent']) {
        if (filter[key]) q.set('tick_' + key, filter[key]);
      }
      about += '; new tasks once a second';
    }
    scopeFeed(q.toString(), about, from);
  }

  async function load() {
    const q = query();
    if (filter.after) q.set('after', filter.after);
    const page = await api.get('/v1/tasks?' + q);
    show(page.tasks);
    replace(pager,
      filter.after ? h('a', { href: link({ ...filter, after: '' }) }, '« newest') : null,
      page.next ? h('a', { id: 'next-page', href: link({ ...filter, after: page.next }) }, 'older »') : null);
  }

  // A tick says matching tasks were created up to its seq: read the first
  // page again (state at or after that seq) and follow its rows from the
  // seq, so every change after it arrives, whatever the read showed. One
  // read at a time; ticks during a read make one more.
  let reading = false;
  let tickSeq = null;
  async function reread() {
    reading = true;
    while (tickSeq !== null && !gone) {
      const from = tickSeq;
      tickSeq = null;
      try {
        show((await api.get('/v1/tasks?' + query())).tasks);
        error.textContent = '';
      } catch (e) {
        replace(error, e.message);
      }
      // Follows the rows shown (as read, or as they were when the read
      // failed: the daemon is away, and the next tick reads again) from
      // the tick's seq.
      follow(from);
    }
    reading = false;
  }

  const unsubscribeTick = onTick((tick) => {
    if (!live) return;
    tickSeq = tick.seq;
    if (!reading) reread();
  });
  const unsubscribe = onEvent((record) => {
    const event = record.event;
    const entry = rows.get(event.task_id);
    // A finished task never changes again: a later event is a replay.
    if (!entry || TERMINAL.has(entry.cells.status.textContent)) return;
    if (event.kind === 'attempt_started') setStatus(entry, 'running', event.attempt);
    else if (event.kind === 'task_queued') setStatus(entry, 'queued');
    else if (event.kind === 'task_finished') {
      setStatus(entry, event.status);
      refill(entry);
    }
  });

  load().then(() => follow(seq), (e) => {
    replace(error, e.message);
    follow(seq);
  });

  return () => {
    gone = true;
    unsubscribe();
    unsubscribeTick();
  };
}

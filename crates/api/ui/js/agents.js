// Agents: kind, concurrency, running and queued now, and outcomes and
// p50/p99 durations since the daemon started, from `GET /v1/agents`, read
// again every REFRESH_MS while the view is open.

import * as api from './api.js';
import { duration, h, replace } from './dom.js';

/** A quantile's bucket bound: "≤ 50 ms"; "> 1 h" past the last one. */
function bound(ms, finished) {
  if (!finished) return '–';
  return ms === undefined ? '> 1 h' : `≤ ${duration(ms)}`;
}

const REFRESH_MS = 5000;

export function agentsView(root) {
  const body = h('div', { id: 'agents' });
  const error = h('p', { class: 'error', role: 'alert' });
  const note = h('p', { class: 'muted' });
  replace(root, h('h1', {}, 'Agents'), error, body, note);

  const count = (n, window) => (n >= window ? `${n}+` : String(n));
  async function load() {
    const page = await api.get('/v1/agents');
    const w = page.window;
    replace(body, h('table', {},
      h('thead', {}, h('tr', {}, ['agent', 'kind', 'concurrency', 'running', 'queued', 'pass', 'blocked', 'failed', 'cancelled', 'p50', 'p99']
        .map((c) => h('th', {}, c)))),
      h('tbody', { id: 'agent-rows' }, page.agents.map((a) => h('tr', { dataset: { agent: a.name } },
        h('td', {}, h('a', { href: `#/tasks?agent=${encodeURIComponent(a.name)}` }, a.name), a.enabled ? '' : ' (disabled)'),
        h('td', {}, a.kind),
        h('td', { class: 'num' }, a.concurrency === null || a.concurrency === undefined ? 'unlimited' : String(a.concurrency)),
        h('td', { class: 'num running' }, count(a.running, w)),
        h('td', { class: 'num queued' }, count(a.queued, w)),
        h('td', { class: 'num pass' }, String(a.since_start.pass)),
        h('td', { class: 'num blocked' }, String(a.since_start.blocked)),
        h('td', { class: 'num failed' }, String(a.since_start.failed)),
        h('td', { class: 'num cancelled' }, String(a.since_start.cancelled)),
        h('td', { class: 'num' }, bound(a.since_start.p50_le_ms, a.since_start.finished)),
        h('td', { class: 'num' }, bound(a.since_start.p99_le_ms, a.since_start.finished)))))));
    note.textContent = 'Outcomes and durations (creation to finish) since the daemon started;'
      + ' a duration is the bound of its histogram bucket.'
      + (page.truncated ? ' Only the first agents by name are shown.' : '');
  }

  let timer = null;
  let stopped = false;
  async function tick() {
    try {
      await load();
      error.textContent = '';
    } catch (e) {
      replace(error, e.message);
    }
    if (!stopped) timer = setTimeout(tick, REFRESH_MS);
  }
  tick();
  return () => {
    stopped = true;
    clearTimeout(timer);
  };
}

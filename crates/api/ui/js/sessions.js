// MainAI sessions: kind, role names, connected, last seen, parked frames,
// description and a link to the tasks each owns, from `GET /v1/operators`
// for the admin; an operator session sees its own (`GET /v1/operators/S-…`)
// and observers are told the list is the admin's. Refreshed when a socket
// comes or goes (`session_attached`/`session_detached`).

import * as api from './api.js';
import { onEvent, session } from './app.js';
import { h, replace, time } from './dom.js';

export function sessionsView(root) {
  const body = h('div', { id: 'sessions' });
  const error = h('p', { class: 'error', role: 'alert' });
  replace(root, h('h1', {}, 'Sessions'), error, body);
  const caller = session.caller || {};
  if (caller.role !== 'admin' && !caller.sid) {
    replace(body, h('p', { class: 'muted', id: 'sessions-admin-only' }, 'The session list is for the admin only.'));
    return () => {};
  }

  async function load() {
    const list = caller.sid
      ? [await api.get(`/v1/operators/${encodeURIComponent(caller.sid)}`)]
      : await api.get('/v1/operators');
    replace(body, list.length === 0
      ? h('p', { class: 'muted' }, 'No sessions.')
      : h('table', {},
        h('thead', {}, h('tr', {}, ['session', 'kind', 'roles', 'connected', 'last seen', 'parked frames', 'tasks', 'description'].map((c) => h('th', {}, c)))),
        h('tbody', { id: 'session-rows' }, list.map((s) => h('tr', { dataset: { sid: s.sid } },
          h('td', { class: 'id' }, s.sid),
          h('td', {}, s.kind),
          h('td', {}, s.roles.join(', ')),
          h('td', { class: 'connected' }, s.connected ? 'yes' : 'no'),
          h('td', { class: 'time' }, time(s.last_seen)),
          h('td', { class: 'num parked' }, String(s.parked)),
          h('td', {}, h('a', { href: `#/tasks?session=${s.sid}` }, 'tasks')),
          h('td', {}, s.description || ''))))));
  }

  let timer = null;
  const reload = () => {
    if (timer) return;
    timer = setTimeout(() => {
      timer = null;
      load().catch((e) => replace(error, e.message));
    }, 200);
  };
  const unsubscribe = onEvent((rec) => {
    if (rec.event.kind === 'session_attached' || rec.event.kind === 'session_detached') reload();
  });
  load().catch((e) => replace(error, e.message));
  return () => {
    unsubscribe();
    if (timer) clearTimeout(timer);
  };
}

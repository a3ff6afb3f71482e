// The dashboard's entry: sign-in, the hash router (`#/overview`,
// `#/tasks?…`, `#/task/T-…`, `#/sessions`, `#/agents`), and the one live feed of the daemon's event log that
// every view listens to.

import * as api from './api.js';
import { replace } from './dom.js';
import { tasksView } from './tasks.js';
import { taskView } from './task.js';
import { overviewView } from './overview.js';
import { sessionsView } from './sessions.js';
import { agentsView } from './agents.js';

const $ = (id) => document.getElementById(id);

/** What the signed-in credential is: `{role, sid?}` from /v1/status. */
export const session = { caller: null };

// The event feed: one `/v1/events` stream for the page, resumed from the
// last seq seen; views subscribe to what they show. For an operator
// session the daemon sends only its own tasks' and session's events.
// The feed asks only for the kinds the current view shows: the task
// views every kind but `output` (the bulk of the log: a task's output
// comes from that task's own stream, only while its page is open), the
// overview and agents views (which read the daemon's own history and
// counters) only the sessions' comings and goings. A change of kinds
// starts the feed again from the daemon's `event_seq`, read before the
// new view reads its data, so the view's reads and the feed still join.
const TASK_KINDS = ['task_created', 'task_queued', 'attempt_started', 'attempt_finished',
  'task_finished', 'task_cancelled', 'long_hold_warn', 'session_attached', 'session_detached'];
const SESSION_KINDS = ['session_attached', 'session_detached'];
const listeners = new Set();
let feed = null;
let feedKinds = '';
let lastSeq = 0;

/** Calls `listener(record)` for every new event record until the view goes. */
export function onEvent(listener) {
  listeners.add(listener);
  return () => listeners.delete(listener);
}

/** Marks the live badge. */
export function setLive(state) {
  const badge = $('live');
  badge.dataset.state = state;
  badge.textContent = { live: 'live', retrying: 'reconnecting…', off: 'offline' }[state] || state;
}

function startFeed(afterSeq, kinds) {
  lastSeq = afterSeq;
  feedKinds = kinds.join(',');
  // The badge's tooltip says what the page follows.
  $('live').title = `following ${kinds.join(', ')}`;
  feed = api.follow(`/v1/events?kinds=${feedKinds}`, {
    lastId: () => lastSeq,
    onState: setLive,
    // The daemon read past events of other kinds: resume after them.
    onProgress: (id) => {
      lastSeq = Math.max(lastSeq, Number(id) || 0);
    },
    onEvent: (_id, data) => {
      const record = JSON.parse(data);
      // Resumed streams start strictly after lastSeq; this guards a repeat anyway.
      if (record.seq <= lastSeq) return;
      lastSeq = record.seq;
      for (const listener of listeners) listener(record);
    },
  });
}

function stopFeed() {
  if (feed) feed.stop();
  feed = null;
}

let feedChange = Promise.resolve();

/**
 * Follows `kinds`, from `knownSeq` or a fresh `event_seq` when they change;
 * one change at a time, so quick hash changes never open two streams.
 */
function ensureFeed(kinds, knownSeq) {
  feedChange = feedChange.then(() => switchFeed(kinds, knownSeq));
  return feedChange;
}

async function switchFeed(kinds, knownSeq) {
  if (feed && feedKinds === kinds.join(',')) return;
  stopFeed();
  let seq = knownSeq;
  if (seq === undefined) {
    try {
      seq = (await api.get('/v1/status')).event_seq;
    } catch {
      // The daemon is away: resume from the last seq seen.
      seq = lastSeq;
    }
  }
  startFeed(seq, kinds);
}

let teardown = null;
let routes = 0;

async function route(knownSeq) {
  const mine = ++routes;
  if (teardown) teardown();
  teardown = null;
  const view = $('view');
  replace(view);
  const hash = location.hash.replace(/^#/, '') || '/overview';
  const [path, query = ''] = hash.split('?');
  const params = new URLSearchParams(query);
  const task = path.match(/^\/task\/(T-[0-9a-f]{32})$/);
  const counters = path === '/agents' || !(task || path === '/tasks' || path === '/sessions');
  await ensureFeed(counters ? SESSION_KINDS : TASK_KINDS, knownSeq);
  // A later hash change took over while the feed started.
  if (mine !== routes) return;
  if (task) teardown = taskView(view, task[1]);
  else if (path === '/tasks') teardown = tasksView(view, params);
  else if (path === '/sessions') teardown = sessionsView(view);
  else if (path === '/agents') teardown = agentsView(view);
  else teardown = overviewView(view);
  for (const a of document.querySelectorAll('#nav a')) {
    a.classList.toggle('current', path.startsWith('/' + a.dataset.view));
  }
}

async function signedIn() {
  const status = await api.get('/v1/status');
  if (!['admin', 'observer', 'operator'].includes(status.caller.role)) {
    throw new api.ApiError(403, 'forbidden',
      'the dashboard needs the admin token, an observer token or a session token');
  }
  session.caller = status.caller;
  $('signin').hidden = true;
  $('nav').hidden = false;
  $('signout').hidden = false;
  // An operator session is named by its id: it sees and cancels its own tasks.
  $('who').textContent = status.caller.sid ? `session ${status.caller.sid}` : status.caller.role;
  window.addEventListener('hashchange', () => route());
  await route(status.event_seq);
}

function signOut() {
  api.setToken(null);
  stopFeed();
  location.hash = '';
  location.reload();
}

function showSignIn(message = '') {
  $('signin').hidden = false;
  $('nav').hidden = true;
  $('signin-error').textContent = message;
  $('token').focus();
}

async function boot() {
  setLive('off');
  // A page being left closes its streams at once: a browser holds six
  // connections per host, and a reloaded tab must not wait for old ones.
  window.addEventListener('pagehide', () => {
    stopFeed();
    if (teardown) teardown();
  });
  api.whenUnauthorized(() => {
    api.setToken(null);
    stopFeed();
    showSignIn('The daemon refused the token; sign in again.');
  });
  $('signout').addEventListener('click', signOut);
  $('signin-form').addEventListener('submit', async (event) => {
    event.preventDefault();
    api.setToken($('token').value.trim());
    $('token').value = '';
    try {
      await signedIn();
    } catch (error) {
      api.setToken(null);
      showSignIn(error.message);
    }
  });
  if (!api.token()) return showSignIn();
  try {
    await signedIn();
  } catch (error) {
    showSignIn(error.message);
  }
}

boot();

// The dashboard's entry: sign-in, the hash router (`#/overview`,
// `#/tasks?…`, `#/task/T-…`, `#/sessions`, `#/agents`, `#/branches?…`,
// `#/runs?…`, `#/run/R-…`), and the one live feed of the daemon's event
// log that every view listens to.

import * as api from './api.js';
import { h, replace } from './dom.js';
import { tasksView } from './tasks.js';
import { taskView } from './task.js';
import { overviewView } from './overview.js';
import { sessionsView } from './sessions.js';
import { agentsView } from './agents.js';
import { branchesView } from './branches.js';
import { runView, runsView } from './runs.js';

const $ = (id) => document.getElementById(id);

/** What the signed-in credential is: `{role, sid?}` from /v1/status. */
export const session = { caller: null };

// The event feed: one `/v1/events` stream for the page, resumed from the
// last seq seen; views subscribe to what they show. For an operator
// session the daemon sends only its own tasks' and session's events.
// Each view asks for no more than it shows: the overview, agents and
// sessions views (which read the daemon's own history and counters) only
// the sessions' comings and goings; the run list and a run's page the
// runs' changes (`run_changed`); a task's page its own task's events
// but `output` (its output comes from the task's own stream); the task
// list the status changes of its unfinished rows (`tasks=`) and, on a
// live first page, a coalesced `tick` of new matching tasks at most once
// a second. A change of scope starts the feed again from a seq read
// before the view read its data, so the view's reads and the feed join.
const TASK_KINDS = ['task_created', 'task_queued', 'attempt_started', 'attempt_finished',
  'task_finished', 'task_cancelled', 'long_hold_warn'];
const SESSION_KINDS = ['session_attached', 'session_detached'];
const RUN_KINDS = ['run_changed'];
const listeners = new Set();
const tickListeners = new Set();
let feed = null;
let feedQuery = '';
let lastSeq = 0;
/** Data frames the feed received since the page loaded (`#live`'s `data-frames`). */
let frames = 0;

/** Calls `listener(record)` for every new event record until the view goes. */
export function onEvent(listener) {
  listeners.add(listener);
  return () => listeners.delete(listener);
}

/** Calls `listener({seq, created})` for every tick of new tasks until the view goes. */
export function onTick(listener) {
  tickListeners.add(listener);
  return () => tickListeners.delete(listener);
}

/** Marks the live badge. */
export function setLive(state) {
  const badge = $('live');
  badge.dataset.state = state;
  badge.textContent = {
    live: 'live', retrying: 'reconnecting…', connecting: 'connecting…', signedout: 'not signed in',
  }[state] || state;
}

function startFeed(afterSeq, query, about) {
  // Signed out while the feed was being changed: nothing to follow.
  if (!api.token()) return;
  lastSeq = afterSeq;
  feedQuery = query;
  // The badge's tooltip says what the page follows.
  $('live').title = `following ${about}`;
  feed = api.follow(`/v1/events?${query}`, {
    lastId: () => lastSeq,
    onState: setLive,
    // The daemon's log ends before what this page saw: it is a new log (a
    // memory store restarted, a database replaced). The view is read
    // afresh and the feed follows from the new log's end.
    onRefused: async () => {
      const seq = await api.get('/v1/status').then((status) => status.event_seq);
      if (seq >= lastSeq) return;
      lastSeq = seq;
      route(seq);
    },
    // The daemon read past events this feed does not take: resume after them.
    onProgress: (id) => {
      lastSeq = Math.max(lastSeq, Number(id) || 0);
    },
    onEvent: (_id, data, name) => {
      frames += 1;
      $('live').dataset.frames = String(frames);
      if (name === 'tick') {
        const tick = JSON.parse(data);
        lastSeq = Math.max(lastSeq, tick.seq);
        for (const listener of tickListeners) listener(tick);
        return;
      }
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
  feedQuery = '';
}

let feedChange = Promise.resolve();

/** The daemon's `event_seq`, or the last seq seen when it is away. */
async function freshSeq() {
  try {
    return (await api.get('/v1/status')).event_seq;
  } catch {
    return lastSeq;
  }
}

/**
 * Follows `query` (`about` describes it), from `knownSeq` or a fresh
 * `event_seq` when it changes; one change at a time, so quick hash
 * changes never open two streams.
 */
function ensureFeed(query, about, knownSeq) {
  feedChange = feedChange.then(async () => {
    if (feed && feedQuery === query) return;
    stopFeed();
    startFeed(knownSeq ?? await freshSeq(), query, about);
  });
  return feedChange;
}

/**
 * For a view that scopes the feed itself: stops it and answers the seq
 * its data must be read after (`knownSeq`, or a fresh `event_seq`).
 */
function pauseFeed(knownSeq) {
  const seq = feedChange.then(async () => {
    stopFeed();
    return knownSeq ?? await freshSeq();
  });
  feedChange = seq.then(() => undefined);
  return seq;
}

/**
 * Follows `/v1/events?query` from `seq` (strictly after), replacing the
 * feed whatever it followed: the task list's scope after each read.
 */
export function scopeFeed(query, about, seq) {
  feedChange = feedChange.then(() => {
    stopFeed();
    startFeed(seq, query, about);
  });
  return feedChange;
}

let teardown = null;
let routes = 0;

/** The views by their path; `#/task/T-…` and `#/run/R-…` are matched apart. */
const VIEWS = new Set(['/overview', '/tasks', '/sessions', '/agents', '/branches', '/runs']);

/** Stops the view shown (its reads, timers and streams) and empties `#view`. */
function clearView() {
  routes += 1;
  if (teardown) teardown();
  teardown = null;
  replace($('view'));
}

/** What a hash that names no view shows: what was asked, and the way back. */
function notFound(view, path) {
  const what = path.startsWith('/task/') ? `No task ${path.slice('/task/'.length)}: a task id is T- and 32 hex digits.`
    : path.startsWith('/run/') ? `No run ${path.slice('/run/'.length)}: a run id is R- and 32 hex digits.`
      : `No view #${path}.`;
  replace(view,
    h('h1', {}, 'Not found'),
    h('p', { class: 'error', role: 'alert', id: 'not-found' }, what),
    h('p', {}, h('a', { href: '#/overview' }, 'Overview')));
}

async function route(knownSeq) {
  if (!session.caller) return;
  const mine = ++routes;
  if (teardown) teardown();
  teardown = null;
  const view = $('view');
  replace(view);
  const hash = location.hash.replace(/^#/, '');
  const [asked, query = ''] = hash.split('?');
  const path = asked === '' || asked === '/' ? '/overview' : asked;
  const params = new URLSearchParams(query);
  const task = path.match(/^\/task\/(T-[0-9a-f]{32})$/);
  const run = path.match(/^\/run\/(R-[0-9a-f]{32})$/);
  const known = task || run || VIEWS.has(path);
  let seq;
  if (path === '/tasks') seq = await pauseFeed(knownSeq);
  else if (run || path === '/runs') await ensureFeed(`kinds=${RUN_KINDS.join(',')}`, RUN_KINDS.join(', '), knownSeq);
  else if (task) {
    await ensureFeed(`kinds=${TASK_KINDS.join(',')}&tasks=${task[1]}`,
      `${TASK_KINDS.join(', ')} of ${task[1]}`, knownSeq);
  } else await ensureFeed(`kinds=${SESSION_KINDS.join(',')}`, SESSION_KINDS.join(', '), knownSeq);
  // A later hash change took over while the feed started.
  if (mine !== routes) return;
  if (task) teardown = taskView(view, task[1]);
  else if (run) teardown = runView(view, run[1]);
  else if (path === '/runs') teardown = runsView(view, params);
  else if (path === '/tasks') teardown = tasksView(view, params, seq);
  else if (path === '/sessions') teardown = sessionsView(view);
  else if (path === '/agents') teardown = agentsView(view);
  else if (path === '/branches') teardown = branchesView(view, params);
  else if (path === '/overview') teardown = overviewView(view);
  else notFound(view, path);
  for (const a of document.querySelectorAll('#nav a')) {
    a.classList.toggle('current', Boolean(known) && path.startsWith('/' + a.dataset.view));
  }
}

/** Routes on every hash change; added once, however often the page signs in. */
function onHashChange() {
  route();
}

async function signedIn() {
  const status = await api.get('/v1/status');
  if (!['admin', 'observer', 'operator'].includes(status.caller.role)) {
    throw new api.ApiError(403, 'forbidden',
      'the dashboard needs the admin token, an observer token or a session token');
  }
  session.caller = status.caller;
  setLive('connecting');
  $('signin').hidden = true;
  $('nav').hidden = false;
  $('signout').hidden = false;
  // An operator session is named by its id: it sees and cancels its own tasks.
  replace($('who'), status.caller.sid ? `session ${status.caller.sid}` : status.caller.role);
  window.addEventListener('hashchange', onHashChange);
  await route(status.event_seq);
}

/** Signs this tab out: every other tab of this origin too when `everywhere`. */
function signOut(everywhere) {
  api.setToken(null);
  if (everywhere) api.signOutEverywhere();
  stopFeed();
  location.hash = '';
  location.reload();
}

function showSignIn(message = '') {
  setLive('signedout');
  $('live').title = '';
  $('signin').hidden = false;
  $('nav').hidden = true;
  $('signout').hidden = true;
  replace($('who'));
  replace($('signin-error'), message);
  $('token').focus();
}

/** Whether a token was typed on this page's form. */
let submitted = false;

async function boot() {
  setLive('signedout');
  // A page being left closes its streams at once: a browser holds six
  // connections per host, and a reloaded tab must not wait for old ones.
  window.addEventListener('pagehide', () => {
    stopFeed();
    if (teardown) teardown();
  });
  // A refused token leaves a signed-out page: the view is stopped and
  // emptied (no read or stream of it goes on), the feed closed, the header
  // cleared. Reads of the old view that fail after this send nothing
  // (api.js refuses a request without a token).
  api.whenUnauthorized(() => {
    api.setToken(null);
    session.caller = null;
    stopFeed();
    clearView();
    showSignIn('The daemon refused the token; sign in again.');
  });
  $('signout').addEventListener('click', () => signOut(true));
  api.whenSignedOutElsewhere(() => {
    if (api.token()) signOut(false);
  });
  $('signin-form').addEventListener('submit', async (event) => {
    event.preventDefault();
    submitted = true;
    api.setToken($('token').value.trim());
    $('token').value = '';
    try {
      await signedIn();
    } catch (error) {
      api.setToken(null);
      showSignIn(error.message);
    }
  });
  // A new tab shows the form at once and takes the token of a signed-in
  // tab of this origin if one answers before a token is typed.
  if (!api.token()) {
    showSignIn();
    const shared = await api.askOtherTabs();
    if (!shared || submitted) return;
    api.setToken(shared);
  }
  try {
    await signedIn();
  } catch (error) {
    showSignIn(error.message);
  }
}

boot();

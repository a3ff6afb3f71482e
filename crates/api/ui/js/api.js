// The API client: the token lives in sessionStorage (the tab's, never on
// disk) and goes in `Authorization: Bearer`, never in a URL. A tab opened
// with no token asks the other tabs of this origin for theirs over a
// BroadcastChannel, and a sign-out in one tab signs every tab out (see
// docs/decisions.md, The dashboard shows what changed). Event streams are
// read with fetch() and a stream reader (EventSource cannot send headers),
// resumed with `Last-Event-ID` after a dropped connection or a daemon
// restart.

const KEY = 'swarmd.token';
/** How long a new tab waits for a signed-in tab to answer. */
const ASK_MS = 400;
const channel = typeof BroadcastChannel === 'function' ? new BroadcastChannel('swarmd.auth') : null;
let onSignedOutElsewhere = () => {};

if (channel) {
  channel.addEventListener('message', (event) => {
    const message = event.data || {};
    // A signed-in tab answers a new tab's question with its token.
    if (message.type === 'ask' && token()) channel.postMessage({ type: 'token', token: token() });
    else if (message.type === 'signout') onSignedOutElsewhere();
  });
}

/**
 * The token of another signed-in tab of this origin, or null when none
 * answers within ASK_MS.
 */
export function askOtherTabs() {
  if (!channel) return Promise.resolve(null);
  return new Promise((resolve) => {
    const answer = (event) => {
      const message = event.data || {};
      if (message.type !== 'token' || typeof message.token !== 'string' || !message.token) return;
      done(message.token);
    };
    const timer = setTimeout(() => done(null), ASK_MS);
    function done(value) {
      clearTimeout(timer);
      channel.removeEventListener('message', answer);
      resolve(value);
    }
    channel.addEventListener('message', answer);
    channel.postMessage({ type: 'ask' });
  });
}

/** Tells every other tab of this origin to forget the token. */
export function signOutEverywhere() {
  if (channel) channel.postMessage({ type: 'signout' });
}

/** What to do when another tab signs out. */
export function whenSignedOutElsewhere(handler) {
  onSignedOutElsewhere = handler;
}

export function token() {
  return sessionStorage.getItem(KEY);
}

export function setToken(value) {
  if (value) sessionStorage.setItem(KEY, value);
  else sessionStorage.removeItem(KEY);
}

/** An error answer: its status, the daemon's `{error, code}`, and the
 * paths a `branch_conflict` names (`files`, else empty). */
export class ApiError extends Error {
  constructor(status, code, message, files = []) {
    super(message);
    this.status = status;
    this.code = code;
    this.files = files;
  }
}

let onUnauthorized = () => {};

/** What to do when the daemon says the token is no good. */
export function whenUnauthorized(handler) {
  onUnauthorized = handler;
}

// No token, no `Authorization` header: a request without one is refused
// here, before it is sent (`signedOut`), and never goes as `Bearer null`.
function headers(bearer, extra = {}) {
  return bearer ? { Authorization: `Bearer ${bearer}`, ...extra } : { ...extra };
}

/** The refusal of a request made while no token is held; nothing is sent. */
function signedOut() {
  return new ApiError(401, 'unauthorized', 'not signed in');
}

/** The error of a failed answer to a request sent with `bearer`. A 401
 * signs the page out unless the page holds another token by now (a read
 * sent before a new sign-in). */
async function failure(response, bearer) {
  let body = {};
  try {
    body = await response.json();
  } catch {
    // Not JSON: the status says enough.
  }
  if (response.status === 401 && bearer === token()) onUnauthorized();
  const files = Array.isArray(body.files) ? body.files.map(String) : [];
  return new ApiError(response.status, body.code || 'http_' + response.status,
    body.error || response.statusText, files);
}

/** GET a JSON route. */
export async function get(path) {
  const bearer = token();
  if (!bearer) throw signedOut();
  const response = await fetch(path, { headers: headers(bearer) });
  if (!response.ok) throw await failure(response, bearer);
  return response.json();
}

/** GET a route's body as bytes (a `Blob`): a spilled value from `/v1/blobs/{sha256}`. */
export async function bytes(path) {
  const bearer = token();
  if (!bearer) throw signedOut();
  const response = await fetch(path, { headers: headers(bearer) });
  if (!response.ok) throw await failure(response, bearer);
  return response.blob();
}

/** POST JSON to a route. */
export async function post(path, body) {
  const bearer = token();
  if (!bearer) throw signedOut();
  const response = await fetch(path, {
    method: 'POST',
    headers: headers(bearer, { 'Content-Type': 'application/json' }),
    body: JSON.stringify(body ?? {}),
  });
  if (!response.ok) throw await failure(response, bearer);
  return response.json();
}

/** GET text (the Prometheus page). */
export async function text(path) {
  const bearer = token();
  if (!bearer) throw signedOut();
  const response = await fetch(path, { headers: headers(bearer) });
  if (!response.ok) throw await failure(response, bearer);
  return response.text();
}

const RETRY_MS = [250, 500, 1000, 2000];

/**
 * Follows an SSE route until `stop()`: `onEvent(id, data)` per event,
 * `onState('live' | 'retrying' | 'ended')` as the connection comes and
 * goes. `lastId()` is asked before every (re)connect and sent as
 * `Last-Event-ID`, so the daemon resumes strictly after what was seen.
 * When the daemon ends the stream, `finished()` says whether that was the
 * end (a finished task's output) or a drop to resume from (a restart).
 * `onProgress(id)` gets the `id:`-only events a filtered stream sends to
 * say how far it read past what it sent. `onEvent` gets the event's name
 * (`event:`, `message` without one) as its third argument. A 400 (the
 * daemon refused the cursor) calls `onRefused(error)` before the retry.
 */
export function follow(path, { lastId, onEvent, onProgress = () => {}, onState = () => {}, finished = async () => false, onRefused = async () => {} }) {
  const controller = new AbortController();
  let stopped = false;
  (async () => {
    let failures = 0;
    while (!stopped) {
      let ended = false;
      try {
        const bearer = token();
        if (!bearer) throw signedOut();
        const extra = { Accept: 'text/event-stream' };
        const id = lastId();
        if (id !== undefined && id !== null && id !== '') extra['Last-Event-ID'] = String(id);
        const response = await fetch(path, { headers: headers(bearer, extra), signal: controller.signal });
        if (!response.ok) throw await failure(response, bearer);
        onState('live');
        failures = 0;
        await readEvents(response.body, onEvent, onProgress);
        ended = true;
      } catch (error) {
        if (stopped) return;
        if (error instanceof ApiError && error.status === 401) return;
        // A refused cursor (past the end of the daemon's log): the caller
        // picks where to resume before the next try.
        if (error instanceof ApiError && error.status === 400) {
          try {
            await onRefused(error);
          } catch {
            // The daemon is away: the next try asks again.
          }
        }
      }
      if (ended) {
        let over = false;
        try {
          over = await finished();
        } catch {
          // Unknown (the daemon is away): resume.
        }
        if (over) {
          onState('ended');
          return;
        }
      }
      onState('retrying');
      await new Promise((resolve) => setTimeout(resolve, RETRY_MS[Math.min(failures, RETRY_MS.length - 1)]));
      failures += 1;
    }
  })();
  return {
    stop() {
      stopped = true;
      controller.abort();
    },
  };
}

/**
 * Parses a text/event-stream body, calling `onEvent(id, data, name)` per
 * event and `onProgress(id)` per event with an id and no data.
 */
async function readEvents(body, onEvent, onProgress) {
  const reader = body.pipeThrough(new TextDecoderStream()).getReader();
  let buffer = '';
  let id = null;
  let name = 'message';
  let data = [];
  for (;;) {
    const { value, done } = await reader.read();
    if (done) return;
    buffer += value;
    let newline;
    while ((newline = buffer.indexOf('\n')) >= 0) {
      const line = buffer.slice(0, newline).replace(/\r$/, '');
      buffer = buffer.slice(newline + 1);
      if (line === '') {
        if (data.length) onEvent(id, data.join('\n'), name);
        else if (id !== null) onProgress(id);
        id = null;
        name = 'message';
        data = [];
      } else if (line.startsWith(':')) {
        // A keep-alive comment.
      } else {
        const colon = line.indexOf(':');
        const field = colon < 0 ? line : line.slice(0, colon);
        let rest = colon < 0 ? '' : line.slice(colon + 1);
        if (rest.startsWith(' ')) rest = rest.slice(1);
        if (field === 'id') id = rest;
        else if (field === 'data') data.push(rest);
        else if (field === 'event') name = rest;
      }
    }
  }
}

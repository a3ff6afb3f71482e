// The overview: tasks by status, running and queued now, throughput and
// dispatch latency over the last minutes (figures, and charts with a time
// axis drawn by chart.js), connected sessions, store health and draining. The daemon keeps a sample of its own counters every 5 s
// for 15 minutes (`GET /v1/metrics/history`), so the page shows the last
// minutes as soon as it opens; it reads that and `/v1/status` again every
// REFRESH_MS, two small reads whatever the load.

import * as api from './api.js';
import { h, replace } from './dom.js';
import { lineChart } from './chart.js';

const REFRESH_MS = 5000;
/** The window the rates and quantiles cover: the newest samples. */
const WINDOW_MS = 5 * 60 * 1000;

/** Adds per-bucket counts. */
function addBuckets(into, counts) {
  counts.forEach((n, i) => {
    into[i] = (into[i] || 0) + n;
  });
  return into;
}

/**
 * The bound (seconds) of the bucket holding the q-quantile of per-bucket
 * `counts` (+Inf last); null when nothing was observed.
 */
export function quantile(bounds, counts, q) {
  const total = counts.reduce((a, b) => a + b, 0);
  if (total <= 0) return null;
  const rank = q * total;
  let seen = 0;
  for (let i = 0; i < counts.length; i += 1) {
    seen += counts[i];
    if (seen >= rank) return i < bounds.length ? bounds[i] : Infinity;
  }
  return Infinity;
}

function seconds(value) {
  if (value === null) return '–';
  if (value === Infinity) return '> largest bucket';
  return value < 1 ? `≤ ${(value * 1000).toFixed(value < 0.01 ? 1 : 0)} ms` : `≤ ${value} s`;
}

export function overviewView(root) {
  const body = h('div', { id: 'overview' });
  const error = h('p', { class: 'error', role: 'alert' });
  replace(root, h('h1', {}, 'Overview'), error, body);

  function render(status, history) {
    const newest = history.samples.length ? history.samples[history.samples.length - 1].at_ms : 0;
    const samples = history.samples.filter((s) => s.at_ms > newest - WINDOW_MS);
    const spanMs = samples.reduce((t, s) => t + s.span_ms, 0);
    const total = (key) => samples.reduce((t, s) => t + s[key], 0);
    const rate = (key) => (spanMs > 0 ? (total(key) / (spanMs / 1000)).toFixed(1) + '/s' : '–');
    const dispatch = samples.reduce((acc, s) => addBuckets(acc, s.dispatch), []);
    const sync = samples.reduce((acc, s) => addBuckets(acc, s.sync), []);
    // Finished counts are since the daemon started; queued and running are now.
    const byStatus = { ...status.counts.tasks_finished, queued: status.counts.queued, running: status.counts.running };
    const onPostgres = status.store.backend === 'postgres';
    const store = sync.length
      ? seconds(quantile(history.sync_bounds, sync, 0.99))
      : 'no WAL syncs (memory store or synchronous = normal)';
    const window = spanMs > 0 ? `last ${Math.round(spanMs / 1000)} s` : 'no sample yet: the daemon takes one every 5 s';
    replace(body,
      h('div', { class: 'cards' },
        card('running now', status.counts.running, 'ov-running'),
        card('queued now', status.counts.queued, 'ov-queued'),
        card('sessions connected', `${status.counts.sessions_connected} of ${status.counts.sessions}`, 'ov-sessions'),
        card('draining', status.draining ? 'yes' : 'no', 'ov-draining')),
      h('h2', {}, 'Tasks by status (finished since the daemon started)'),
      h('table', { class: 'narrow', id: 'ov-status' },
        h('tbody', {}, Object.entries(byStatus).map(([k, v]) =>
          h('tr', {}, h('td', { class: 'status', dataset: { status: k } }, k), h('td', { class: 'num' }, String(v)))))),
      h('h2', { id: 'ov-window' }, `Throughput and latency (${window})`),
      h('table', { class: 'narrow', id: 'ov-rates' }, h('tbody', {},
        h('tr', {}, h('td', {}, 'created'), h('td', { class: 'num', id: 'ov-created' }, rate('created'))),
        h('tr', {}, h('td', {}, 'finished'), h('td', { class: 'num', id: 'ov-finished' }, rate('finished'))),
        h('tr', {}, h('td', {}, 'dispatch latency p50'),
          h('td', { class: 'num' }, seconds(quantile(history.dispatch_bounds, dispatch, 0.5)))),
        h('tr', {}, h('td', {}, 'dispatch latency p99'),
          h('td', { class: 'num' }, seconds(quantile(history.dispatch_bounds, dispatch, 0.99)))),
        h('tr', {}, h('td', {}, onPostgres ? 'store commit p99' : 'store WAL sync p99'), h('td', { class: 'num' }, store)))),
      h('div', { class: 'charts' },
        throughputChart(samples, newest || Date.now()),
        latencyChart(samples, newest || Date.now(), history.dispatch_bounds)),
      h('h2', {}, 'Daemon'),
      h('dl', {},
        h('dt', {}, 'version'), h('dd', {}, status.version),
        h('dt', {}, 'uptime'), h('dd', {}, `${status.uptime_secs} s`),
        h('dt', {}, 'store'), h('dd', {}, `${status.store.backend} at ${status.store.state_dir}`),
        h('dt', {}, 'base URL'), h('dd', {}, status.base_url)));
  }

  let timer = null;
  let stopped = false;
  async function refresh() {
    try {
      const [status, history] = await Promise.all([api.get('/v1/status'), api.get('/v1/metrics/history')]);
      if (stopped) return;
      error.textContent = '';
      render(status, history);
    } catch (e) {
      replace(error, e.message);
    }
    if (!stopped) timer = setTimeout(refresh, REFRESH_MS);
  }
  refresh();
  return () => {
    stopped = true;
    clearTimeout(timer);
  };
}

/** Tasks created and finished per sample (5 s) over the window. */
function throughputChart(samples, newest) {
  return lineChart({
    id: 'ov-throughput',
    caption: 'Tasks per 5 s:',
    from: newest - WINDOW_MS,
    to: newest,
    series: [
      { name: 'created', cls: 'created', points: samples.map((s) => [s.at_ms, s.created]) },
      { name: 'finished', cls: 'finished', points: samples.map((s) => [s.at_ms, s.finished]) },
    ],
  });
}

/** Dispatch latency p50 and p99 per sample (the bound of its bucket), in ms. */
function latencyChart(samples, newest, bounds) {
  const largest = bounds.length ? bounds[bounds.length - 1] : 0;
  const at = (q) => samples.map((s) => {
    const v = quantile(bounds, s.dispatch, q);
    // Past the largest bucket is drawn at it.
    return [s.at_ms, v === null ? null : Math.min(v, largest) * 1000];
  });
  return lineChart({
    id: 'ov-latency',
    caption: 'Dispatch latency, ms (bucket bound):',
    from: newest - WINDOW_MS,
    to: newest,
    minMax: 1,
    format: (v) => (v < 10 ? String(Number(v.toFixed(2))) : String(Math.round(v))),
    series: [
      { name: 'p50', cls: 'p50', points: at(0.5) },
      { name: 'p99', cls: 'p99', points: at(0.99) },
    ],
  });
}

function card(label, value, id) {
  return h('div', { class: 'card' }, h('div', { class: 'label' }, label), h('div', { class: 'value', id }, String(value)));
}

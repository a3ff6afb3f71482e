// The overview: tasks by status, running and queued now, throughput and
// dispatch latency over the last minutes, connected sessions, store health
// and draining. It samples `/metrics` and `/v1/status` every SAMPLE_MS and
// computes rates and quantiles from the differences between samples, so it
// costs the daemon two small reads per interval whatever the load.

import * as api from './api.js';
import { h, replace } from './dom.js';

const SAMPLE_MS = 5000;
/** The second sample comes sooner, so rates show within a second. */
const FIRST_SAMPLE_MS = 1000;
/** Samples kept: five minutes' worth. */
const WINDOW = 60;

/** Parses Prometheus text into `name{labels}` → number. */
export function parseMetrics(text) {
  const values = new Map();
  for (const line of text.split('\n')) {
    if (!line || line.startsWith('#')) continue;
    const space = line.lastIndexOf(' ');
    values.set(line.slice(0, space), Number(line.slice(space + 1)));
  }
  return values;
}

function sum(values, prefix) {
  let total = 0;
  for (const [key, value] of values) if (key.startsWith(prefix)) total += value;
  return total;
}

/** Histogram buckets `[le, cumulative count]` of `name`, ascending. */
function buckets(values, name) {
  const out = [];
  for (const [key, value] of values) {
    const m = key.match(new RegExp(`^${name}_bucket\\{le="([^"]+)"\\}$`));
    if (m) out.push([m[1] === '+Inf' ? Infinity : Number(m[1]), value]);
  }
  return out.sort((a, b) => a[0] - b[0]);
}

/** The q-quantile's bucket bound of what was observed between two samples. */
export function quantile(older, newer, name, q) {
  const now = buckets(newer, name);
  const then = new Map(buckets(older, name));
  const deltas = now.map(([le, count]) => [le, count - (then.get(le) || 0)]);
  const total = deltas.length ? deltas[deltas.length - 1][1] : 0;
  if (total <= 0) return null;
  const rank = q * total;
  for (const [le, count] of deltas) if (count >= rank) return le;
  return Infinity;
}

function seconds(value) {
  if (value === null) return '–';
  if (value === Infinity) return '> largest bucket';
  return value < 1 ? `≤ ${(value * 1000).toFixed(value < 0.01 ? 1 : 0)} ms` : `≤ ${value} s`;
}

export function overviewView(root) {
  const samples = [];
  const body = h('div', { id: 'overview' });
  const error = h('p', { class: 'error', role: 'alert' });
  replace(root, h('h1', {}, 'Overview'), error, body);

  function render(status) {
    const [first, last] = [samples[0], samples[samples.length - 1]];
    const span = (last.at - first.at) / 1000;
    const finished = (s) => sum(s.values, 'swarmd_tasks_finished_total');
    const created = (s) => s.values.get('swarmd_tasks_created_total') || 0;
    const rate = (f) => (span > 0 ? ((f(last) - f(first)) / span).toFixed(1) + '/s' : '–');
    // Finished counts are since the daemon started; queued and running are now.
    const byStatus = { ...status.counts.tasks_finished, queued: status.counts.queued, running: status.counts.running };
    const store = last.values.has('swarmd_store_sync_seconds_count')
      ? seconds(quantile(first.values, last.values, 'swarmd_store_sync_seconds', 0.99))
      : 'no WAL syncs (memory store or synchronous = normal)';
    const window = span > 0 ? `last ${Math.round(span)} s` : 'since the page opened';
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
      h('h2', {}, `Throughput and latency (${window})`),
      h('table', { class: 'narrow', id: 'ov-rates' }, h('tbody', {},
        h('tr', {}, h('td', {}, 'created'), h('td', { class: 'num' }, rate(created))),
        h('tr', {}, h('td', {}, 'finished'), h('td', { class: 'num' }, rate(finished))),
        h('tr', {}, h('td', {}, 'dispatch latency p50'),
          h('td', { class: 'num' }, seconds(quantile(first.values, last.values, 'swarmd_dispatch_latency_seconds', 0.5)))),
        h('tr', {}, h('td', {}, 'dispatch latency p99'),
          h('td', { class: 'num' }, seconds(quantile(first.values, last.values, 'swarmd_dispatch_latency_seconds', 0.99)))),
        h('tr', {}, h('td', {}, 'store WAL sync p99'), h('td', { class: 'num' }, store)))),
      h('h2', {}, 'Daemon'),
      h('dl', {},
        h('dt', {}, 'version'), h('dd', {}, status.version),
        h('dt', {}, 'uptime'), h('dd', {}, `${status.uptime_secs} s`),
        h('dt', {}, 'store'), h('dd', {}, `${status.store.backend} at ${status.store.state_dir}`),
        h('dt', {}, 'base URL'), h('dd', {}, status.base_url)));
  }

  let timer = null;
  let stopped = false;
  async function sample() {
    try {
      const [text, status] = await Promise.all([api.text('/metrics'), api.get('/v1/status')]);
      if (stopped) return;
      samples.push({ at: Date.now(), values: parseMetrics(text) });
      if (samples.length > WINDOW) samples.shift();
      error.textContent = '';
      render(status);
    } catch (e) {
      error.textContent = e.message;
    }
    if (!stopped) timer = setTimeout(sample, samples.length === 1 ? FIRST_SAMPLE_MS : SAMPLE_MS);
  }
  sample();
  return () => {
    stopped = true;
    clearTimeout(timer);
  };
}

function card(label, value, id) {
  return h('div', { class: 'card' }, h('div', { class: 'label' }, label), h('div', { class: 'value', id }, String(value)));
}

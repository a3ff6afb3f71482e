// One task: prompt, input, policy, attempts, its live output (progress,
// partial text appended as it arrives, artifacts, the Final; a `worktree`
// artifact as a diff; a value over the inline limit, stored as a blob,
// with download and show), audit records, and cancel (confirmed) for the
// admin and the owning session. Raw JSON (policy, metadata, audit) is folded shut. Output comes
// from the task's own SSE stream, resumed by `<attempt>:<seq>`; the task's
// state is read again when the event feed says it changed.

import * as api from './api.js';
import { onEvent, session } from './app.js';
import { append, duration, h, replace, show, time } from './dom.js';
import { isWorktreeReport, renderWorktree } from './diff.js';

const TERMINAL = new Set(['pass', 'blocked', 'failed', 'cancelled']);

/** Whether a final value is a merge agent's record (docs/branches.md). */
function isMergeRecord(value) {
  return value !== null && typeof value === 'object' && !Array.isArray(value)
    && typeof value.branch === 'string' && typeof value.head === 'string'
    && typeof value.base === 'string' && typeof value.strategy === 'string';
}
/** A spilled worktree report up to this size is read back and shown as a diff. */
const MAX_BLOB_DIFF = 8 * 1024 * 1024;
/** A spilled value up to this size can be read back and shown as text. */
const MAX_BLOB_SHOW = 1024 * 1024;

/** Whether `ref` names a value stored as a blob: a `file_ref` to
 * `blobs/<sha256>`, which `GET /v1/blobs/{sha256}` answers. */
function isBlobRef(ref) {
  return ref !== null && typeof ref === 'object' && !Array.isArray(ref) && ref.kind === 'file_ref'
    && typeof ref.sha256 === 'string' && /^[0-9a-f]{64}$/.test(ref.sha256)
    && Number.isSafeInteger(ref.size) && ref.size >= 0;
}

/** A spilled value read back: its JSON's bytes and the value they hold
 * (undefined when they are not JSON). */
async function readBlob(ref) {
  const bytes = await api.bytes(`/v1/blobs/${ref.sha256}`);
  let value;
  try {
    value = JSON.parse(await bytes.text());
  } catch {
    value = undefined;
  }
  return { bytes, value };
}

/**
 * A value stored as a blob: its size, **download (N bytes)** and, up to
 * MAX_BLOB_SHOW, **show**, both reading `GET /v1/blobs/{sha256}` with the
 * page's token. The download saves a string as its text and any other
 * value as its JSON, under `name` (`.txt` or `.json` added when `suffix`);
 * show puts the value in as text, like every worker string.
 */
function blobValue(ref, name, suffix = false) {
  const status = h('span', { class: 'error blob-error', role: 'alert' });
  const shown = h('pre', { class: 'blob-value', hidden: true });
  const save = h('button', { type: 'button', class: 'blob-download' }, `download (${ref.size} bytes)`);
  save.addEventListener('click', async () => {
    status.textContent = '';
    save.disabled = true;
    try {
      const { bytes, value } = await readBlob(ref);
      const text = typeof value === 'string';
      download(suffix ? `${name}${text ? '.txt' : '.json'}` : name, text ? value : bytes);
    } catch (e) {
      status.textContent = e.message;
    } finally {
      save.disabled = false;
    }
  });
  let reveal = null;
  if (ref.size <= MAX_BLOB_SHOW) {
    reveal = h('button', { type: 'button', class: 'blob-show' }, 'show');
    let read = false;
    reveal.addEventListener('click', async () => {
      if (read) {
        shown.hidden = !shown.hidden;
        reveal.textContent = shown.hidden ? 'show' : 'hide';
        return;
      }
      status.textContent = '';
      reveal.disabled = true;
      try {
        const { bytes, value } = await readBlob(ref);
        replace(shown, value === undefined ? await bytes.text() : show(value));
        read = true;
        shown.hidden = false;
        reveal.textContent = 'hide';
      } catch (e) {
        status.textContent = e.message;
      } finally {
        reveal.disabled = false;
      }
    });
  }
  return h('div', { class: 'blob', dataset: { sha256: ref.sha256, size: String(ref.size) } },
    h('span', { class: 'muted' }, `stored as a blob (${ref.size} bytes)`), ' ',
    save, reveal ? [' ', reveal] : null, ' ', status, shown);
}

export function taskView(root, id) {
  const summary = h('div', { id: 'task-summary' });
  const details = h('div', { id: 'task-details' });
  const attempts = h('div', { id: 'attempts' });
  const output = h('div', { id: 'output' });
  const audit = h('div', { id: 'audit' });
  const children = h('div', { id: 'subtasks' });
  const error = h('p', { class: 'error', role: 'alert', id: 'task-error' });
  const actions = h('p', { class: 'actions' });
  replace(root,
    h('p', {}, h('a', { href: '#/tasks' }, '« tasks')),
    h('h1', {}, 'Task ', h('code', { id: 'task-id' }, id)),
    actions, error, summary,
    h('h2', {}, 'Output'), output,
    h('h2', {}, 'Attempts'), attempts,
    h('h2', {}, 'Sub-tasks'), children,
    details,
    audit);

  let task = null;
  // The tasks that continue this one (`continue_from`), newest first.
  let successors = [];
  let stream = null;
  let stopped = false;

  // Output, one block per attempt; records are keyed `<attempt>:<seq>`.
  const seen = new Set();
  let last = null;
  const blocks = new Map();
  function block(attempt) {
    let entry = blocks.get(attempt);
    if (!entry) {
      entry = {
        usage: h('p', { class: 'usage' }),
        progress: h('ul', { class: 'progress' }),
        partial: h('pre', { class: 'partial' }),
        artifacts: h('ul', { class: 'artifacts' }),
        final: h('div', { class: 'final' }),
      };
      output.append(h('section', { class: 'attempt-output', dataset: { attempt } },
        h('h3', {}, `Attempt ${attempt}`), entry.usage, entry.progress, entry.partial, entry.artifacts, entry.final));
      blocks.set(attempt, entry);
    }
    return entry;
  }

  function content(ref) {
    if (!ref) return '';
    if (ref.kind === 'inline') return show(ref.value);
    return `(stored as a blob: ${ref.size} bytes, sha256 ${ref.sha256})`;
  }

  function record(rec) {
    const key = `${rec.attempt}:${rec.seq}`;
    if (seen.has(key)) return;
    seen.add(key);
    last = key;
    const entry = block(rec.attempt);
    const event = rec.event;
    if (event.type === 'progress' && event.stage === 'usage' && usage(entry.usage, event.note)) {
      // Shown as the attempt's usage line rather than as a note.
    } else if (event.type === 'progress') {
      entry.progress.append(h('li', {}, h('span', { class: 'stage' }, event.stage || ''), ' ', event.note || ''));
    } else if (event.type === 'partial') {
      if (isBlobRef(event.chunk)) entry.partial.append(blobValue(event.chunk, `${id}-partial-${rec.attempt}-${rec.seq}`, true));
      else append(entry.partial, content(event.chunk));
    } else if (event.type === 'artifact') {
      const value = event.content && event.content.kind === 'inline' ? event.content.value : undefined;
      if (event.name === 'worktree' && isWorktreeReport(value)) {
        entry.artifacts.append(worktreeItem(value));
        return;
      }
      if (event.name === 'worktree' && event.content && event.content.kind === 'file_ref'
          && event.content.size <= MAX_BLOB_DIFF) {
        // A diff over the inline limit was spilled to a blob: read it back.
        const item = h('li', { class: 'worktree' }, h('span', { class: 'name' }, event.name), ' ',
          h('span', { class: 'muted' }, `reading its ${event.content.size} bytes…`));
        entry.artifacts.append(item);
        api.get(`/v1/blobs/${event.content.sha256}`).then((report) => {
          item.replaceWith(isWorktreeReport(report)
            ? worktreeItem(report)
            : h('li', {}, h('span', { class: 'name' }, event.name), h('pre', {}, show(report))));
        }, (e) => replace(item, h('span', { class: 'name' }, event.name), ' ', h('span', { class: 'error' }, e.message)));
        return;
      }
      if (isBlobRef(event.content)) {
        // Over the inline limit: read back from its blob when asked.
        entry.artifacts.append(h('li', {}, h('span', { class: 'name' }, event.name), ' ',
          blobValue(event.content, event.name)));
        return;
      }
      const text = content(event.content);
      entry.artifacts.append(h('li', {},
        h('span', { class: 'name' }, event.name), ' ',
        h('button', { type: 'button', onclick: () => download(event.name, text) }, 'download'),
        h('pre', {}, text)));
    } else if (event.type === 'final') {
      replace(entry.final, h('strong', {}, event.ok === false ? 'Final (not ok)' : 'Final'),
        isBlobRef(event.content)
          ? blobValue(event.content, `${id}-final-${rec.attempt}`, true)
          : h('pre', { class: 'final-value' }, content(event.content)));
      const value = event.content && event.content.kind === 'inline' ? event.content.value : undefined;
      if (rec.producer === 'merge' && event.ok !== false && isMergeRecord(value)) mergeDiff(entry, value);
    }
  }

  // A merge task's branch: the diff from its base to the head it made,
  // which the daemon reads from git (docs/branches.md). A merge stopped at
  // a conflict says so: its branch holds only what merged before it.
  function mergeDiff(entry, record) {
    const conflict = record.conflict && typeof record.conflict === 'object'
      ? ` (stopped at a conflict with ${record.conflict.branch}: the branches before it)` : '';
    const item = h('li', { class: 'worktree' }, h('span', { class: 'name' }, 'merge'), ' ',
      h('span', { class: 'muted' }, 'reading its diff…'));
    entry.artifacts.append(item);
    api.get(`/v1/tasks/${encodeURIComponent(id)}/diff`).then(
      (report) => item.replaceWith(worktreeItem(report, `merge${conflict}`)),
      (e) => replace(item, h('span', { class: 'name' }, 'merge'), ' ', h('span', { class: 'error' }, e.message)));
  }

  // A coding worker's branch: its diff as a diff, downloadable as a patch.
  function worktreeItem(report, label = 'worktree') {
    return h('li', { class: 'worktree' },
      h('span', { class: 'name' }, label), ' ',
      h('button', { type: 'button', onclick: () => download('worktree.diff', report.diff) }, 'download diff'),
      renderWorktree(report));
  }

  // A CLI agent's `usage` note (docs/agents-cli.md): tokens, turns, cost.
  function usage(node, note) {
    let u;
    try {
      u = JSON.parse(note);
    } catch {
      return false;
    }
    if (!u || typeof u !== 'object') return false;
    const parts = [];
    if (u.cli) parts.push(String(u.cli));
    if (u.input_tokens !== undefined) parts.push(`${u.input_tokens} tokens in`);
    if (u.output_tokens !== undefined) parts.push(`${u.output_tokens} out`);
    if (u.total_tokens !== undefined) parts.push(`${u.total_tokens} total`);
    if (u.turns !== undefined) parts.push(`${u.turns} turns`);
    if (typeof u.cost_usd === 'number') parts.push(`$${u.cost_usd.toFixed(4)}`);
    replace(node, h('strong', {}, 'Usage: '), parts.join(' · '));
    return true;
  }

  function followOutput() {
    stream = api.follow(`/v1/tasks/${id}/output`, {
      lastId: () => last,
      onEvent: (_id, data) => record(JSON.parse(data)),
      finished: async () => {
        await load();
        return TERMINAL.has(task.status);
      },
    });
  }

  function renderSummary() {
    const fields = [
      ['status', h('span', { class: 'status', id: 'task-status', dataset: { status: task.status } }, task.status)],
      ['agent', task.agent],
      ['attempt', String(task.attempt)],
      ['created', time(task.created_ms)],
      ['finished', time(task.finished_ms)],
      ['session', task.session],
      ['parent', task.parent && h('a', { href: `#/task/${task.parent}` }, task.parent)],
      ['continues', task.continued_from && h('a', { href: `#/task/${task.continued_from}` }, task.continued_from)],
      ['resumes session', task.resume && task.resume.session_id],
      ['continued by', successors.length
        ? successors.flatMap((t, i) => [i ? ' ' : null, h('a', { href: `#/task/${t.id}` }, t.id)])
        : null],
      ['reason', task.reason],
      ['layers', task.layers && task.layers.length ? task.layers.join(', ') : null],
    ];
    replace(summary,
      h('dl', {}, fields.filter(([, v]) => v).map(([k, v]) => [h('dt', {}, k), h('dd', {}, v)])),
      h('h2', {}, 'Prompt'), h('pre', { id: 'task-prompt' }, task.prompt),
      task.result ? [h('h2', {}, 'Result'), result()] : null);
    replace(details,
      task.system ? [h('h2', {}, 'System'), h('pre', {}, task.system)] : null,
      task.input !== undefined ? [h('h2', {}, 'Input'), h('pre', {}, show(task.input))] : null,
      task.metadata ? raw('Metadata', show(task.metadata)) : null,
      raw('Policy', show(task.policy)));
    replace(attempts, h('table', {},
      h('thead', {}, h('tr', {}, ['#', 'held by', 'waited', 'started', 'duration', 'outcome', 'reason'].map((c) => h('th', {}, c)))),
      h('tbody', {}, task.attempts.map((a, i) => h('tr', {},
        h('td', { class: 'num' }, String(a.attempt)),
        h('td', {}, holder(a)),
        // Queued before the first attempt; the retry backoff before a later one.
        h('td', {}, duration(a.started_ms - (i === 0 ? task.created_ms : task.attempts[i - 1].finished_ms || a.started_ms))),
        h('td', {}, time(a.started_ms)),
        h('td', {}, a.finished_ms ? duration(a.finished_ms - a.started_ms) : 'running'),
        h('td', { class: 'status', dataset: { status: a.outcome || 'running' } }, a.outcome || ''),
        h('td', {}, a.reason || ''))))));
    const caller = session.caller || {};
    const mayCancel = caller.role === 'admin' || (caller.sid && caller.sid === task.session);
    replace(actions, mayCancel && !TERMINAL.has(task.status)
      ? h('button', { id: 'cancel', type: 'button', class: 'danger', onclick: cancel }, 'Cancel task')
      : null);
  }

  // The result, `{value, ok}`; a value stored as a blob is offered for
  // download and show, kept across the summary's redraws.
  let spilledResult = null;
  function result() {
    const value = task.result.value;
    if (!isBlobRef(value)) return h('pre', { id: 'task-result' }, show(task.result));
    if (!spilledResult || spilledResult.dataset.sha256 !== value.sha256) {
      spilledResult = h('div', { id: 'task-result', dataset: { sha256: value.sha256 } },
        h('p', {}, `ok: ${task.result.ok}`), blobValue(value, `${id}-result`, true));
    }
    return spilledResult;
  }

  // Who ran an attempt: a process group, the Lua runtime, or a session.
  function holder(a) {
    if (a.spawner === 'process') return a.process_group ? `process group ${a.process_group.pgid}` : 'process';
    if (a.spawner === 'operator') return `session ${task.operator_sid || task.session || '(any)'}`;
    return a.spawner;
  }

  async function cancel() {
    if (!window.confirm(`Cancel task ${id}?`)) return;
    try {
      await api.post(`/v1/tasks/${id}/cancel`, { reason: 'cancelled from the dashboard' });
      await load();
    } catch (e) {
      replace(error, e.message);
    }
  }

  async function load() {
    task = await api.get(`/v1/tasks/${id}`);
    if (stopped) return;
    successors = (await api.get(`/v1/tasks?continued_from=${id}&limit=20`)).tasks;
    if (stopped) return;
    renderSummary();
    const subtasks = await api.get(`/v1/tasks?parent=${id}&limit=100`);
    replace(children, subtasks.tasks.length
      ? h('ul', {}, subtasks.tasks.map((t) => h('li', {},
        h('a', { href: `#/task/${t.id}` }, t.id), ' ', t.agent, ' ',
        h('span', { class: 'status', dataset: { status: t.status } }, t.status))),
      subtasks.next ? h('a', { href: `#/tasks?parent=${id}` }, 'all sub-tasks') : null)
      : h('p', { class: 'muted' }, 'none'));
    const records = await api.get(`/v1/audit?task_id=${id}&limit=100`);
    const n = records.records.length;
    replace(audit, raw(`Audit (${n}${records.next ? '+' : ''} record${n === 1 ? '' : 's'})`,
      n ? records.records.map((r) => show(r)).join('\n') : 'none'));
  }

  // Task events change the summary: read it again, at most once per 200 ms.
  let timer = null;
  const unsubscribe = onEvent((rec) => {
    if (rec.event.task_id !== id || rec.event.kind === 'output' || timer) return;
    timer = setTimeout(() => {
      timer = null;
      load().catch((e) => replace(error, e.message));
    }, 200);
  });

  load().then(followOutput).catch((e) => replace(error, e.message));

  return () => {
    stopped = true;
    unsubscribe();
    if (timer) clearTimeout(timer);
    if (stream) stream.stop();
  };
}

/** Raw JSON folded shut under a heading-like summary. */
function raw(title, text) {
  return h('details', { class: 'raw' }, h('summary', {}, title), h('pre', {}, text));
}

/** Saves `data` (text or a Blob's bytes) as a file named `name`. */
function download(name, data) {
  const url = URL.createObjectURL(new Blob([data], { type: 'application/octet-stream' }));
  const a = h('a', { href: url, download: name });
  document.body.append(a);
  a.click();
  a.remove();
  setTimeout(() => URL.revokeObjectURL(url), 1000);
}

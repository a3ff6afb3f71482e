// Branches (docs/branches.md): the branches coding tasks left, from `GET
// /v1/branches`, filtered by agent (`#/branches?agent=…`). The admin and
// operator sessions (each for its own tasks, the only ones it is shown)
// may apply a finished task's branch to a branch they name (`POST
// /v1/tasks/{id}/apply`) and prune finished tasks' branches after a
// dry-run preview (`POST /v1/branches/prune`); an observer sees the list
// only. The daemon decides anyway: a refusal shows its message. Branch
// names, prompts and git's messages go in as text.

import * as api from './api.js';
import { session } from './app.js';
import { h, replace } from './dom.js';

const TERMINAL = new Set(['pass', 'blocked', 'failed', 'cancelled']);
const MODES = [
  ['auto', 'auto: fast-forward, else merge'],
  ['ff', 'fast-forward only'],
  ['merge', 'merge commit'],
];
/** What an apply did, as the words before and after its target's name. */
const OUTCOMES = {
  created: ['created', 'at'],
  fast_forward: ['fast-forwarded', 'to'],
  merge: ['merged into', 'with a merge commit, now at'],
  up_to_date: ['', 'already holds it, at'],
};

/** Whether the signed-in credential may act on the branches it is shown. */
function mayAct() {
  const caller = session.caller || {};
  return caller.role === 'admin' || Boolean(caller.sid);
}

/** How long ago `ms` was, short. */
function age(ms) {
  const s = Math.max(0, Math.round((Date.now() - ms) / 1000));
  if (s < 60) return `${s} s ago`;
  if (s < 3600) return `${Math.floor(s / 60)} min ago`;
  if (s < 86400) return `${Math.floor(s / 3600)} h ago`;
  return `${Math.floor(s / 86400)} d ago`;
}

const short = (sha) => String(sha || '').slice(0, 10);

export function branchesView(root, params) {
  const agent = params.get('agent') || '';
  const acts = mayAct();
  const error = h('p', { class: 'error', role: 'alert', id: 'branches-error' });
  const body = h('div', { id: 'branches' });
  const filter = h('select', { id: 'branch-agent', 'aria-label': 'agent' },
    h('option', { value: '' }, 'every agent'));
  filter.addEventListener('change', () => {
    location.hash = filter.value ? `#/branches?agent=${encodeURIComponent(filter.value)}` : '#/branches';
  });
  const reload = h('button', { type: 'button', id: 'branches-reload', onclick: () => load() }, 'Reload');
  const applyForm = acts ? applyPanel() : null;
  const pruneForm = acts ? prunePanel() : null;
  replace(root,
    h('h1', {}, 'Branches'),
    h('div', { class: 'filters' }, filter, reload,
      acts ? h('button', { type: 'button', id: 'prune', onclick: () => pruneForm.open() }, 'Prune…') : null),
    error,
    applyForm && applyForm.node,
    pruneForm && pruneForm.node,
    body,
    h('p', { class: 'muted' }, 'The branches of agents whose worktrees this daemon adds, newest commit first;'
      + ' ahead and merged are against the agent\'s base.'));

  let stopped = false;

  async function agents() {
    const page = await api.get('/v1/agents');
    const names = page.agents.filter((a) => a.kind === 'process' || a.kind === 'operator').map((a) => a.name);
    if (agent && !names.includes(agent)) names.push(agent);
    for (const name of names) filter.append(h('option', { value: name }, name));
    filter.value = agent;
  }

  async function load() {
    const list = await api.get(agent ? `/v1/branches?agent=${encodeURIComponent(agent)}` : '/v1/branches');
    if (stopped) return;
    error.textContent = '';
    replace(body, list.branches.length === 0
      ? h('p', { class: 'muted', id: 'branches-none' }, 'No branches.')
      : h('table', { class: 'branches' },
        h('thead', {}, h('tr', {}, ['branch', 'task', 'prompt', 'status', 'ahead', 'merged', 'head', 'age',
          acts ? '' : null].filter((c) => c !== null).map((c) => h('th', {}, c)))),
        h('tbody', { id: 'branch-rows' }, list.branches.map((b) => h('tr', { dataset: { branch: b.name, task: b.task_id } },
          h('td', { class: 'name' }, h('code', {}, b.name)),
          h('td', { class: 'task id' }, h('a', { href: `#/task/${b.task_id}` }, b.task_id.slice(-8))),
          h('td', { class: 'prompt' }, b.title),
          h('td', { class: 'status', dataset: { status: b.status } }, b.status),
          h('td', { class: 'num ahead' }, String(b.ahead)),
          h('td', { class: 'merged' }, b.merged ? 'yes' : 'no'),
          h('td', { class: 'head id', title: b.head }, short(b.head)),
          h('td', { class: 'age time', title: new Date(b.committed_ms).toLocaleString() }, age(b.committed_ms)),
          acts ? h('td', { class: 'actions' }, TERMINAL.has(b.status)
            ? h('button', { type: 'button', class: 'apply', onclick: () => applyForm.open(b) }, 'Apply to…')
            : null) : null)))));
  }

  // "Apply to…": the target branch, the mode, and whether a checkout of it may move.
  function applyPanel() {
    const title = h('strong', {});
    const into = h('input', { id: 'apply-into', name: 'into', required: true, autocomplete: 'off',
      placeholder: 'feature/my-branch', 'aria-label': 'target branch' });
    const mode = h('select', { id: 'apply-mode', name: 'mode', 'aria-label': 'mode' },
      MODES.map(([value, label]) => h('option', { value }, label)));
    const checkedOut = h('input', { id: 'apply-checked-out', type: 'checkbox', name: 'checked_out' });
    const result = h('p', { id: 'apply-result', class: 'ok', role: 'status' });
    const failed = h('p', { id: 'apply-error', class: 'error', role: 'alert' });
    const conflicts = h('ul', { id: 'apply-conflicts', class: 'conflicts', 'aria-label': 'conflicting files' });
    const submit = h('button', { type: 'submit', id: 'apply-submit' }, 'Apply');
    let branch = null;
    const form = h('form', { id: 'apply-form', class: 'panel', hidden: true },
      h('p', {}, 'Apply ', title, ' to the branch:'),
      h('div', { class: 'filters' }, into, mode,
        h('label', { title: 'Also move the branch where it is checked out (refused with uncommitted changes there)' },
          checkedOut, ' also where checked out'),
        submit,
        h('button', { type: 'button', onclick: () => { form.hidden = true; } }, 'Close')),
      h('p', { class: 'muted' }, 'A missing branch is made at the task\'s head. A branch checked out anywhere'
        + ' (your own checkout too) is left alone unless "also where checked out" is ticked.'),
      result, failed,
      h('div', { class: 'conflict-files' }, h('p', { class: 'muted' }, 'Conflicting files (nothing was changed):'), conflicts));
    form.addEventListener('submit', async (event) => {
      event.preventDefault();
      const target = into.value.trim();
      if (!branch || !target) return;
      replace(result);
      replace(failed);
      replace(conflicts);
      submit.disabled = true;
      try {
        const done = await api.post(`/v1/tasks/${branch.task_id}/apply`,
          { into: target, mode: mode.value, checked_out: checkedOut.checked });
        const [before, after] = OUTCOMES[done.outcome] || [done.outcome, 'at'];
        replace(result, before ? `${before} ` : '', h('code', {}, done.into), ` ${after} `,
          h('code', { title: done.head }, short(done.head)),
          done.before ? [' (was ', h('code', { title: done.before }, short(done.before)), ')'] : null,
          done.worktree ? [' and moved in ', h('code', {}, done.worktree)] : null);
        load().catch((e) => replace(error, e.message));
      } catch (e) {
        replace(failed, e.message);
        if (e.files.length) {
          replace(conflicts, e.files.map((f) => h('li', { class: 'conflict' }, h('code', {}, String(f)))));
        }
      } finally {
        submit.disabled = false;
      }
    });
    return {
      node: form,
      open(b) {
        branch = b;
        replace(title, h('code', {}, b.name));
        replace(result);
        replace(failed);
        replace(conflicts);
        form.hidden = false;
        into.focus();
      },
    };
  }

  // "Prune…": a dry run lists what would go; the confirm deletes it.
  function prunePanel() {
    const older = h('input', { id: 'prune-older', type: 'number', min: '0', step: '1', placeholder: 'merged only',
      'aria-label': 'also finished at least this many days ago' });
    const list = h('ul', { id: 'prune-list' });
    const kept = h('ul', { id: 'prune-kept', class: 'muted' });
    const result = h('p', { id: 'prune-result', role: 'status' });
    const failed = h('p', { id: 'prune-error', class: 'error', role: 'alert' });
    const confirm = h('button', { type: 'button', id: 'prune-confirm', class: 'danger', hidden: true }, 'Delete');
    let chosen = null;
    const request = (dryRun) => {
      const body = { dry_run: dryRun };
      if (agent) body.agent = agent;
      const days = older.value.trim();
      if (days !== '') body.older_than_secs = Math.max(0, Math.round(Number(days) * 86400));
      return body;
    };
    const showKept = (pruned) => replace(kept, pruned.kept.map((k) => h('li', {}, h('code', {}, k.name), ': ', k.reason)));
    const preview = h('button', { type: 'button', id: 'prune-preview', onclick: async () => {
      replace(list);
      replace(result);
      replace(failed);
      confirm.hidden = true;
      try {
        chosen = request(false);
        const dry = await api.post('/v1/branches/prune', request(true));
        replace(list, dry.pruned.map((b) => h('li', { dataset: { branch: b.name } },
          h('code', {}, b.name), ' ', h('span', { class: 'muted' }, `${b.status}, ${b.merged ? 'merged' : 'not merged'}`))));
        showKept(dry);
        if (dry.pruned.length) {
          replace(confirm, `Delete ${dry.pruned.length} branch${dry.pruned.length === 1 ? '' : 'es'}`);
          confirm.hidden = false;
        } else replace(result, 'Nothing to prune.');
      } catch (e) {
        replace(failed, e.message);
      }
    } }, 'Preview');
    confirm.addEventListener('click', async () => {
      confirm.hidden = true;
      try {
        const done = await api.post('/v1/branches/prune', chosen);
        replace(list);
        showKept(done);
        replace(result, `Deleted ${done.pruned.length} branch${done.pruned.length === 1 ? '' : 'es'}`
          + (done.kept.length ? `; kept ${done.kept.length}.` : '.'));
        await load();
      } catch (e) {
        replace(failed, e.message);
      }
    });
    const form = h('form', { id: 'prune-form', class: 'panel', hidden: true },
      h('p', {}, 'Delete the branches of finished tasks', agent ? [' of ', h('code', {}, agent)] : null,
        ' that the base holds, and with a number of days also those of tasks that finished at least that long ago.'
        + ' Branches checked out somewhere are kept.'),
      h('div', { class: 'filters' },
        h('label', {}, 'also finished ', older, ' or more days ago'), preview,
        h('button', { type: 'button', onclick: () => { form.hidden = true; } }, 'Close')),
      list, confirm, kept, result, failed);
    form.addEventListener('submit', (event) => event.preventDefault());
    return {
      node: form,
      open() {
        form.hidden = false;
        older.focus();
      },
    };
  }

  agents().catch(() => {});
  load().catch((e) => replace(error, e.message));
  return () => {
    stopped = true;
  };
}

// A coding worker's `worktree` artifact (docs/tasks.md, Worktrees) shown
// as a diff: branch, base and head as fields, then each file with its
// added and removed counts and its hunks, every line marked added, removed
// or context. The diff is the worker's text: it goes in through `h` and
// `append` like every other worker string, so markup stays text and
// disguising characters become markers.

import { h } from './dom.js';

/** Whether `value` is a `worktree` artifact's report. */
export function isWorktreeReport(value) {
  return value !== null && typeof value === 'object' && !Array.isArray(value)
    && typeof value.diff === 'string' && typeof value.branch === 'string';
}

/** A path from a `---`/`+++` line or a header, without `a/`, `b/` or git's quotes. */
function cleanPath(raw) {
  let path = raw.replace(/\t.*$/, '');
  if (path.length > 1 && path.startsWith('"') && path.endsWith('"')) path = path.slice(1, -1);
  return path.replace(/^[ab]\//, '');
}

/**
 * `git diff` text as files: `{path, header: [lines], hunks: [{header,
 * lines: [{kind, text}]}], added, removed, binary}`. A hunk's lines are
 * counted by its header, so a removed line that reads `--- x` is a line,
 * not a file header. Text before the first file, or a cut last hunk,
 * is kept as it is.
 */
export function parseDiff(text) {
  const files = [];
  let file = null;
  let hunk = null;
  let oldLeft = 0;
  let newLeft = 0;
  const lines = text.split('\n');
  if (lines.length && lines[lines.length - 1] === '') lines.pop();
  const startFile = (path) => {
    file = { path, header: [], hunks: [], added: 0, removed: 0, binary: false };
    files.push(file);
    hunk = null;
  };
  for (const line of lines) {
    if (hunk && (oldLeft > 0 || newLeft > 0 || line.startsWith('\\'))) {
      const kind = { '+': 'add', '-': 'del', ' ': 'ctx', '\\': 'note' }[line[0]] || 'ctx';
      hunk.lines.push({ kind, text: line });
      if (kind === 'add') {
        file.added += 1;
        newLeft -= 1;
      } else if (kind === 'del') {
        file.removed += 1;
        oldLeft -= 1;
      } else if (kind === 'ctx') {
        oldLeft -= 1;
        newLeft -= 1;
      }
      continue;
    }
    hunk = null;
    const git = line.match(/^diff --git (?:"?a\/)(.*?)"? "?b\/(.*?)"?$/);
    if (git) {
      startFile(git[2]);
      file.header.push(line);
      continue;
    }
    if (!file) startFile('');
    const range = line.match(/^@@ -\d+(?:,(\d+))? \+\d+(?:,(\d+))? @@/);
    if (range) {
      oldLeft = range[1] === undefined ? 1 : Number(range[1]);
      newLeft = range[2] === undefined ? 1 : Number(range[2]);
      hunk = { header: line, lines: [] };
      file.hunks.push(hunk);
      continue;
    }
    if (line.startsWith('+++ ') && line !== '+++ /dev/null') file.path = cleanPath(line.slice(4));
    else if (line.startsWith('--- ') && line !== '--- /dev/null' && !file.path) file.path = cleanPath(line.slice(4));
    else if (line.startsWith('rename to ')) file.path = cleanPath(line.slice(10));
    else if (line.startsWith('Binary files ')) file.binary = true;
    file.header.push(line);
  }
  return files;
}

/** The report as a diff: fields, a summary, then one fold per file. */
export function renderWorktree(report) {
  const files = parseDiff(report.diff);
  const added = files.reduce((n, f) => n + f.added, 0);
  const removed = files.reduce((n, f) => n + f.removed, 0);
  const listed = Array.isArray(report.files) ? report.files.length : files.length;
  return h('section', { class: 'diff' },
    h('dl', { class: 'diff-fields' },
      h('dt', {}, 'branch'), h('dd', {}, h('code', { class: 'diff-branch' }, report.branch)),
      h('dt', {}, 'base'), h('dd', {}, h('code', { class: 'diff-base' }, String(report.base ?? ''))),
      h('dt', {}, 'head'), h('dd', {}, h('code', { class: 'diff-head' }, String(report.head ?? ''))),
      report.committed_leftovers
        ? [h('dt', {}, 'note'), h('dd', {}, 'swarmd committed changes the worker left uncommitted')]
        : null),
    h('p', { class: 'diff-summary' },
      `${listed}${report.files_truncated ? '+' : ''} file${listed === 1 ? '' : 's'} changed `,
      h('span', { class: 'diff-added' }, `+${added}`), ' ',
      h('span', { class: 'diff-removed' }, `\u2212${removed}`),
      report.diff_truncated ? h('span', { class: 'muted' }, ' (the diff is cut at its cap)') : null),
    files.length ? null : h('p', { class: 'muted' }, 'no change'),
    files.map(renderFile));
}

function renderFile(file) {
  return h('details', { class: 'diff-file', open: true },
    h('summary', {},
      h('span', { class: 'diff-path' }, file.path || '(no path)'), ' ',
      h('span', { class: 'diff-added' }, `+${file.added}`), ' ',
      h('span', { class: 'diff-removed' }, `\u2212${file.removed}`),
      file.binary ? h('span', { class: 'muted' }, ' binary') : null),
    file.hunks.length
      ? file.hunks.map((hunk) => h('div', { class: 'hunk' },
        h('div', { class: 'hunk-header' }, hunk.header),
        hunk.lines.map((line) => h('div', { class: 'line', dataset: { kind: line.kind } }, line.text))))
      : h('div', { class: 'hunk-meta' }, file.header.slice(1).join('\n')));
}

// DOM helpers. Every string goes in as text (text nodes or an attribute
// value), never as HTML: worker output and prompts are attacker-controlled.
// The page's CSP enforces Trusted Types with no policy, so an HTML sink
// such as innerHTML would throw rather than parse a string. Text goes in
// through `append`, which shows the characters that disguise text
// (terminal escapes, other controls, bidi overrides and isolates, invisible
// format characters) as visible markers instead of letting them act.

// C0 controls but tab, newline and carriage return; DEL and the C1
// controls (U+009B is a one-character CSI); the Arabic letter mark;
// zero-width and directional marks; line and paragraph separators; bidi
// embeddings, overrides and isolates; word joiner and invisible operators;
// the byte-order mark.
const DISGUISING =
  /[\u0000-\u0008\u000b\u000c\u000e-\u001f\u007f-\u009f\u061c\u200b\u200e\u200f\u2028-\u202e\u2060-\u2069\ufeff]/u;
const DISGUISING_ALL = new RegExp(DISGUISING.source, 'gu');

/** The marker a disguising character is shown as: a C0 control or DEL as
 * its control picture (ESC as ␛), any other as ⟨U+XXXX⟩. */
export function marker(char) {
  const code = char.codePointAt(0);
  if (code < 0x20) return String.fromCodePoint(0x2400 + code);
  if (code === 0x7f) return '\u2421';
  return `\u27e8U+${code.toString(16).toUpperCase().padStart(4, '0')}\u27e9`;
}

/** A string as nodes: text as it is, each disguising character as a
 * `span.ctl` holding its marker (titled with its code point). */
export function textNodes(text) {
  const string = String(text);
  if (!DISGUISING.test(string)) return [document.createTextNode(string)];
  const nodes = [];
  let at = 0;
  for (const found of string.matchAll(DISGUISING_ALL)) {
    if (found.index > at) nodes.push(document.createTextNode(string.slice(at, found.index)));
    const code = found[0].codePointAt(0).toString(16).toUpperCase().padStart(4, '0');
    const span = document.createElement('span');
    span.className = 'ctl';
    span.title = `U+${code}`;
    span.textContent = marker(found[0]);
    nodes.push(span);
    at = found.index + found[0].length;
  }
  if (at < string.length) nodes.push(document.createTextNode(string.slice(at)));
  return nodes;
}

/** An element with attributes and children (nodes or strings, as text). */
export function h(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs)) {
    if (value === undefined || value === null || value === false) continue;
    if (key === 'class') node.className = value;
    else if (key === 'text') replace(node, String(value));
    else if (key.startsWith('on')) node.addEventListener(key.slice(2), value);
    else if (key === 'dataset') Object.assign(node.dataset, value);
    else node.setAttribute(key, value === true ? '' : String(value));
  }
  append(node, children);
  return node;
}

/** Appends children (nodes, or strings shown as text by `textNodes`). */
export function append(node, children) {
  for (const child of [children].flat(Infinity)) {
    if (child === undefined || child === null || child === false) continue;
    if (child instanceof Node) node.append(child);
    else node.append(...textNodes(child));
  }
}

/** Replaces a node's children. */
export function replace(node, ...children) {
  node.replaceChildren();
  append(node, children);
}

/** A JSON value as display text: strings as they are, the rest indented. */
export function show(value) {
  if (value === undefined) return '';
  if (typeof value === 'string') return value;
  return JSON.stringify(value, null, 2);
}

/** Unix milliseconds as a local time. */
export function time(ms) {
  return ms ? new Date(ms).toLocaleString() : '';
}

/** A duration in milliseconds, short. */
export function duration(ms) {
  if (ms === undefined || ms === null) return '';
  if (ms < 1000) return `${ms} ms`;
  if (ms < 60000) return `${(ms / 1000).toFixed(1)} s`;
  return `${Math.floor(ms / 60000)} min ${Math.round((ms % 60000) / 1000)} s`;
}

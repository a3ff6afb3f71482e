// DOM helpers. Every string goes in as text (textContent or an attribute
// value), never as HTML: worker output and prompts are attacker-controlled.
// The page's CSP enforces Trusted Types with no policy, so an HTML sink
// such as innerHTML would throw rather than parse a string.

/** An element with attributes and children (nodes or strings, as text). */
export function h(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs)) {
    if (value === undefined || value === null || value === false) continue;
    if (key === 'class') node.className = value;
    else if (key === 'text') node.textContent = String(value);
    else if (key.startsWith('on')) node.addEventListener(key.slice(2), value);
    else if (key === 'dataset') Object.assign(node.dataset, value);
    else node.setAttribute(key, value === true ? '' : String(value));
  }
  append(node, children);
  return node;
}

function append(node, children) {
  for (const child of children.flat(Infinity)) {
    if (child === undefined || child === null || child === false) continue;
    node.append(child instanceof Node ? child : document.createTextNode(String(child)));
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

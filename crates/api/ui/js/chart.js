// Line charts drawn as inline SVG by the page itself (no library, nothing
// fetched): a time axis with local HH:MM ticks, a value axis with round
// ticks from zero, light grid lines, one path per series with a dot per
// point, and a legend. Labels are the page's own numbers and names, set as
// text.

const NS = 'http://www.w3.org/2000/svg';
const WIDTH = 560;
const HEIGHT = 200;
const MARGIN = { top: 10, right: 14, bottom: 24, left: 56 };

function svgEl(tag, attrs = {}, text) {
  const node = document.createElementNS(NS, tag);
  for (const [key, value] of Object.entries(attrs)) node.setAttribute(key, String(value));
  if (text !== undefined) node.textContent = text;
  return node;
}

/** A round step near `raw`: 1, 2 or 5 times a power of ten. */
function niceStep(raw) {
  if (!(raw > 0)) return 1;
  const power = 10 ** Math.floor(Math.log10(raw));
  for (const m of [1, 2, 5, 10]) if (m * power >= raw) return m * power;
  return 10 * power;
}

/** Local `HH:MM` of unix milliseconds. */
export function clock(ms) {
  const d = new Date(ms);
  return `${String(d.getHours()).padStart(2, '0')}:${String(d.getMinutes()).padStart(2, '0')}`;
}

/**
 * A figure holding the chart: `series` is `[{name, cls, points: [[ms,
 * value]]}]` (a null value is a gap) over the time span `from`..`to`;
 * `format(value)` labels the value axis; `caption` says what is drawn.
 */
export function lineChart({ id, caption, series, from, to, format = String, minMax = 1 }) {
  const svg = svgEl('svg', {
    id, class: 'chart', viewBox: `0 0 ${WIDTH} ${HEIGHT}`, width: WIDTH, height: HEIGHT,
    role: 'img', 'aria-label': caption,
  });
  const plotW = WIDTH - MARGIN.left - MARGIN.right;
  const plotH = HEIGHT - MARGIN.top - MARGIN.bottom;
  const values = series.flatMap((s) => s.points.map((p) => p[1])).filter((v) => v !== null && Number.isFinite(v));
  const step = niceStep(Math.max(minMax, ...values) / 4);
  const top = step * Math.max(1, Math.ceil(Math.max(minMax, ...values) / step));
  const span = Math.max(1, to - from);
  const x = (ms) => MARGIN.left + ((ms - from) / span) * plotW;
  const y = (v) => MARGIN.top + plotH - (v / top) * plotH;

  // The value axis: round ticks from zero, each with a grid line.
  const yAxis = svgEl('g', { class: 'axis y-axis' });
  yAxis.append(svgEl('line', { x1: MARGIN.left, y1: MARGIN.top, x2: MARGIN.left, y2: MARGIN.top + plotH }));
  for (let v = 0; v <= top + step / 2; v += step) {
    const tick = svgEl('g', { class: 'y-tick' });
    tick.append(
      svgEl('line', { class: 'grid', x1: MARGIN.left, y1: y(v), x2: MARGIN.left + plotW, y2: y(v) }),
      svgEl('text', { x: MARGIN.left - 6, y: y(v) + 4, 'text-anchor': 'end' }, format(v)));
    yAxis.append(tick);
  }
  // The time axis: a tick per minute (per five when the span is long).
  const xAxis = svgEl('g', { class: 'axis x-axis' });
  xAxis.append(svgEl('line', { x1: MARGIN.left, y1: MARGIN.top + plotH, x2: MARGIN.left + plotW, y2: MARGIN.top + plotH }));
  const every = span > 20 * 60000 ? 5 * 60000 : 60000;
  for (let t = Math.ceil(from / every) * every; t <= to; t += every) {
    const tick = svgEl('g', { class: 'x-tick' });
    tick.append(
      svgEl('line', { x1: x(t), y1: MARGIN.top + plotH, x2: x(t), y2: MARGIN.top + plotH + 4 }),
      svgEl('text', { x: x(t), y: HEIGHT - 6, 'text-anchor': 'middle' }, clock(t)));
    xAxis.append(tick);
  }
  svg.append(yAxis, xAxis);

  // One path per series, broken at gaps, with a dot per point.
  for (const s of series) {
    const points = s.points.filter((p) => p[0] >= from && p[0] <= to);
    if (!points.length) continue;
    let d = '';
    let pen = 'M';
    const group = svgEl('g', { class: `series ${s.cls}` });
    for (const [ms, v] of points) {
      if (v === null || !Number.isFinite(v)) {
        pen = 'M';
        continue;
      }
      d += `${pen}${x(ms).toFixed(1)},${y(v).toFixed(1)} `;
      pen = 'L';
      group.append(svgEl('circle', { cx: x(ms).toFixed(1), cy: y(v).toFixed(1), r: 2 }));
    }
    group.prepend(svgEl('path', { d: d.trim() || 'M0,0' }));
    const title = svgEl('title', {}, s.name);
    group.prepend(title);
    svg.append(group);
  }

  const figure = document.createElement('figure');
  figure.className = 'chart-figure';
  const legend = document.createElement('figcaption');
  legend.append(caption);
  for (const s of series) {
    const key = document.createElement('span');
    key.className = `key ${s.cls}`;
    key.textContent = s.name;
    legend.append(' ', key);
  }
  figure.append(svg, legend);
  return figure;
}

// dom.js — building elements (h()), the small pieces every view uses (a state badge, a progress
// bar, label chips) and formatting of times, durations and JSON. Every string goes into the page
// as a text node or through setAttribute, never as HTML.

import { NODE_STATES } from './states.js';

// h('a', {href, class, testid, text, onclick…}, children…) — builds an element; strings become text nodes.
export function h(tag, props, ...children) {
  const e = document.createElement(tag);
  if (props) {
    for (const k of Object.keys(props)) {
      const v = props[k];
      if (v === undefined || v === null || v === false) continue;
      if (k === 'class') e.className = v;
      else if (k === 'text') e.textContent = v;
      else if (k === 'testid') e.setAttribute('data-testid', v);
      else if (k === 'dataset') Object.assign(e.dataset, v);
      else if (k.startsWith('on') && typeof v === 'function') e.addEventListener(k.slice(2), v);
      else if (k === 'value') e.value = v;
      else if (k === 'checked' || k === 'disabled' || k === 'hidden' || k === 'selected' || k === 'required') e[k] = Boolean(v);
      else e.setAttribute(k, v === true ? '' : String(v));
    }
  }
  appendAll(e, children);
  return e;
}

export function appendAll(e, children) {
  for (const c of children) {
    if (c === undefined || c === null || c === false) continue;
    if (Array.isArray(c)) appendAll(e, c);
    else if (c instanceof Node) e.appendChild(c);
    else e.appendChild(document.createTextNode(String(c)));
  }
}

export function badge(state, testid) {
  return h('span', { class: 'badge', 'data-state': state, testid }, state);
}

export function progressBar(progress, testid) {
  const bar = h('div', { class: 'pbar', testid });
  const total = (progress && progress.total) || 0;
  for (const s of NODE_STATES) {
    const n = (progress && progress[s]) || 0;
    if (!n || !total) continue;
    const seg = h('span', { class: 'seg', 'data-state': s, title: `${n} ${s}` });
    seg.style.width = ((100 * n) / total).toFixed(2) + '%';
    bar.appendChild(seg);
  }
  return bar;
}

export function labelChips(labels) {
  const keys = labels ? Object.keys(labels) : [];
  if (!keys.length) return h('span', { class: 'muted' }, '—');
  return h('span', { class: 'chips' }, keys.map((k) => h('span', { class: 'chip' }, `${k}=${labels[k]}`)));
}

// MARK: - Formatting

function pad(n, w = 2) {
  return String(n).padStart(w, '0');
}

export function fmtTime(iso) {
  if (!iso) return '—';
  const d = new Date(iso);
  if (Number.isNaN(d.getTime())) return String(iso);
  return `${d.getFullYear()}-${pad(d.getMonth() + 1)}-${pad(d.getDate())} ${pad(d.getHours())}:${pad(d.getMinutes())}:${pad(d.getSeconds())}`;
}

export function fmtClock(iso) {
  const d = new Date(iso);
  if (Number.isNaN(d.getTime())) return String(iso);
  return `${pad(d.getHours())}:${pad(d.getMinutes())}:${pad(d.getSeconds())}.${pad(d.getMilliseconds(), 3)}`;
}

export function formatOffset(ms) {
  if (ms < 1000) return Math.round(ms) + ' ms';
  if (ms < 60000) return (ms / 1000).toFixed(ms < 10000 ? 1 : 0) + ' s';
  if (ms < 3600000) return Math.floor(ms / 60000) + ' m ' + Math.round((ms % 60000) / 1000) + ' s';
  return Math.floor(ms / 3600000) + ' h ' + Math.round((ms % 3600000) / 60000) + ' m';
}

export function duration(startIso, endIso) {
  if (!startIso) return '—';
  const end = endIso ? Date.parse(endIso) : Date.now();
  const ms = Math.max(0, end - Date.parse(startIso));
  return formatOffset(ms) + (endIso ? '' : ' so far');
}

// At most max characters (not UTF-16 units), the last one an ellipsis when cut.
export function clip(s, max) {
  s = String(s);
  if (s.length <= max) return s;
  const chars = Array.from(s);
  return chars.length <= max ? s : chars.slice(0, max - 1).join('') + '…';
}

export function jsonText(value, max = 100000) {
  let s;
  try {
    s = JSON.stringify(value, null, 2);
  } catch {
    s = String(value);
  }
  if (s === undefined) s = 'undefined';
  return s.length > max ? s.slice(0, max) + `\n… (${s.length - max} more characters)` : s;
}

export function compactJSON(value) {
  try {
    return JSON.stringify(value);
  } catch {
    return String(value);
  }
}

export function sleep(ms) {
  return new Promise((resolve) => setTimeout(resolve, ms));
}

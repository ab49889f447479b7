// graph.js — the job's node model, a layout for series-parallel trees, and their SVG drawing
// (the graph and the timeline). Every string goes into the DOM as text.
//
// The tree comes from GET /v1/jobs/{id}/tasks: each node names its `parent`, and siblings keep
// the order of that list (graph order: a continuation's antecedent before its `then`, a dynamic
// node's source before the graph it spawned, map instances by index). The layout is a recursive
// box layout, linear in the number of drawn boxes:
//   series, continuation, dynamic — children top to bottom, joined by arrows
//                                   (a continuation's arrow is labelled with its `on` when known);
//   parallel, map                 — children side by side; more than 10 are wrapped into rows (10 a
//                                   row, 20 beyond 100 children) and their tasks drawn compact;
//   a map with more than 20 instances (or a parallel with more than 1,000 branches) is drawn as one
//   summary box ("N instances: k succeeded, …") until the user expands it.
//
// Versus the server's picture (GET …/graph?format=svg, GraphSVG.swift): the same rules (series
// top to bottom, parallel and map side by side, big fan-outs as summaries), other numbers, on
// purpose. The picture is static, so it collapses every map or parallel past 20 children (here
// maps past 20, parallels past 1,000, and the user can draw up to 2,000 in full); it never wraps
// rows or draws compact boxes, has no arrow labels, keeps children in list order (here map
// instances sort by index) and draws an empty composite as a plain box. Sizes differ a little
// (boxes 170×46 vs 176×46, gaps 12/26 vs 14/30, padding 8 vs 10). Colours: the same hue per state,
// not the same shades: the picture uses GraphPicture.colour, shared with the Mermaid and DOT
// outputs (pinned by their tests); the page uses style.css's --<state> variables.

import { clip, formatOffset } from './dom.js';
import { isLeaf, NODE_STATES, settledCount, stateRank, TERMINAL_NODE_STATES, zeroCounts } from './states.js';

export const COLLAPSE_MAP_OVER = 20;
export const COLLAPSE_PARALLEL_OVER = 1000;
export const EXPANDABLE_UP_TO = 2000;

const SVG_NS = 'http://www.w3.org/2000/svg';
const VERTICAL = new Set(['series', 'continuation', 'dynamic']);
const HORIZONTAL = new Set(['parallel', 'map']);

const L = {
  leafW: 176, leafH: 46, pad: 10, head: 22, gapV: 30, gapH: 14, rowGap: 16,
  sumW: 270, sumH: 70, minFrameW: 160, emptyW: 150, emptyH: 26, margin: 12,
  // A fan-out of more than `wideOver` children is wrapped into rows (10 a row, 20 beyond 100
  // children), and its task children are drawn as compact boxes.
  wideOver: 10, compactW: 128, compactH: 40,
};

// MARK: - Model

export class JobModel {
  constructor() {
    this.nodes = new Map();     // id → node (the API's TaskNodeState, kept up to date by events)
    this.kidsOf = new Map();    // id → [child ids] in graph order
    this.roots = [];
    this.retries = new Map();   // id → [times of task.retrying events]
  }

  get size() {
    return this.nodes.size;
  }

  kids(id) {
    return this.kidsOf.get(id) || [];
  }

  // Takes a full snapshot (the items of /tasks). Returns true when nodes were added or removed
  // (the layout must be redone), false when only states or fields may have changed.
  setNodes(items) {
    const old = this.nodes;
    const nodes = new Map();
    let structural = old.size === 0 || items.length !== old.size;
    for (const item of items) {
      const prev = old.get(item.id);
      if (!prev) {
        structural = true;
        nodes.set(item.id, item);
      } else if (stateRank(item.state) >= stateRank(prev.state)) {
        nodes.set(item.id, item);
      } else {
        // The snapshot is older than an event already applied: keep the newer state and times.
        nodes.set(item.id, Object.assign({}, item, {
          state: prev.state, startedAt: prev.startedAt || item.startedAt,
          finishedAt: prev.finishedAt, result: prev.result, error: prev.error,
        }));
      }
    }
    this.nodes = nodes;
    if (structural) this.rebuildTree();
    return structural;
  }

  rebuildTree() {
    const kidsOf = new Map();
    const roots = [];
    for (const node of this.nodes.values()) {
      const parent = node.parent;
      if (parent === undefined || parent === null || !this.nodes.has(parent)) {
        roots.push(node.id);
        continue;
      }
      let list = kidsOf.get(parent);
      if (!list) {
        list = [];
        kidsOf.set(parent, list);
      }
      list.push(node.id);
    }
    // Map instances by index (`echo[3]`), whatever order they were created in.
    for (const [parent, list] of kidsOf) {
      const p = this.nodes.get(parent);
      if (p && p.type === 'map' && list.length > 1) {
        const idx = new Map();
        for (const id of list) {
          const m = /\[(\d+)\]$/.exec(id);
          idx.set(id, m ? Number(m[1]) : Number.MAX_SAFE_INTEGER);
        }
        const order = new Map(list.map((id, i) => [id, i]));
        list.sort((a, b) => (idx.get(a) - idx.get(b)) || (order.get(a) - order.get(b)));
      }
    }
    this.kidsOf = kidsOf;
    this.roots = roots;
  }

  // Applies one job event ({seq, type, time, taskId?, data?}). Returns
  // {changed: id|null, unknown: bool} — unknown: the event names a node this model lacks.
  applyEvent(ev) {
    if (!ev.taskId || !ev.type.startsWith('task.')) return { changed: null, unknown: false };
    const node = this.nodes.get(ev.taskId);
    if (!node) return { changed: null, unknown: true };
    const kind = ev.type.slice(5);
    let state = node.state;
    const settled = TERMINAL_NODE_STATES.has(node.state);
    if (kind === 'started') {
      state = 'running';
      if (!node.startedAt) node.startedAt = ev.time;
      if (isLeaf(node) && !node.attempts) node.attempts = 1;
      if (!settled && ev.data && ev.data.workerId) node.workerId = ev.data.workerId;
    } else if (kind === 'retrying') {
      state = 'running';
      let list = this.retries.get(node.id);
      if (!list) {
        list = [];
        this.retries.set(node.id, list);
      }
      list.push(ev.time);
      if (ev.data && typeof ev.data.attempt === 'number') node.attempts = Math.max(node.attempts || 0, ev.data.attempt + 1);
    } else if (NODE_STATES.includes(kind)) {
      state = kind;
      if (!settled) {
        node.finishedAt = ev.time;
        if (kind === 'failed' && ev.data) node.error = ev.data;
      }
    } else {
      return { changed: null, unknown: false };
    }
    // Replayed history (or a snapshot newer than the event) never moves a node back — except a
    // node that starts again after a redrive (job.redriven, `redrivenSeq`) and had not succeeded.
    const rerun = kind === 'started' && this.redrivenSeq > 0 && ev.seq > this.redrivenSeq && node.state !== 'succeeded';
    if (rerun) {
      node.finishedAt = undefined;
      node.error = undefined;
    } else if (stateRank(state) < stateRank(node.state)) return { changed: null, unknown: false };
    if (state === node.state && kind !== 'retrying') return { changed: null, unknown: false };
    // `waitingFor` (live only, from a snapshot): a node that got its key, or ended, no longer waits
    // for it (one that starts may wait for a token or a slot next: the page reads it again).
    if (node.waitingFor && (TERMINAL_NODE_STATES.has(state) || (node.waitingFor === 'concurrency' && node.state === 'pending'))) delete node.waitingFor;
    node.state = state;
    return { changed: node.id, unknown: false };
  }

  // Counts of the task (leaf) nodes by state, like the job's `progress`.
  progress() {
    const p = { total: 0, ...zeroCounts() };
    for (const node of this.nodes.values()) {
      if (!isLeaf(node)) continue;
      p.total += 1;
      p[node.state] = (p[node.state] || 0) + 1;
    }
    return p;
  }

  // Counts of a node's direct children by state (for a collapsed map or parallel).
  childCounts(id) {
    const counts = zeroCounts();
    for (const kid of this.kids(id)) {
      const s = this.nodes.get(kid).state;
      counts[s] = (counts[s] || 0) + 1;
    }
    return counts;
  }
}

// MARK: - Layout

export function isCollapsed(model, node, expanded) {
  if (expanded && expanded.has(node.id)) return false;
  const n = model.kids(node.id).length;
  if (node.type === 'map') return n > COLLAPSE_MAP_OVER;
  if (node.type === 'parallel') return n > COLLAPSE_PARALLEL_OVER;
  return false;
}

// Returns {boxes, edges, width, height, collapsed: Set of ids drawn as summaries}.
// A box: {kind: 'leaf'|'frame'|'summary', id, x, y, w, h, empty?}.
export function layoutGraph(model, expanded) {
  const size = new Map();
  const collapsed = new Set();

  function measure(id, compact) {
    const node = model.nodes.get(id);
    const kids = model.kids(id);
    if (isLeaf(node)) {
      const s = compact ? { w: L.compactW, h: L.compactH } : { w: L.leafW, h: L.leafH };
      size.set(id, s);
      return s;
    }
    let cw;
    let ch;
    let rows = null;
    if (kids.length === 0) {
      cw = L.emptyW;
      ch = L.emptyH;
    } else if (isCollapsed(model, node, expanded)) {
      collapsed.add(id);
      cw = L.sumW;
      ch = L.sumH;
    } else if (HORIZONTAL.has(node.type)) {
      rows = [];
      cw = 0;
      ch = 0;
      const wide = kids.length > L.wideOver;
      const perRow = !wide ? kids.length : kids.length <= 100 ? 10 : 20;
      for (let i = 0; i < kids.length; i += perRow) {
        const row = kids.slice(i, i + perRow);
        let rw = 0;
        let rh = 0;
        for (const kid of row) {
          const k = measure(kid, wide);
          rw += k.w;
          rh = Math.max(rh, k.h);
        }
        rw += L.gapH * (row.length - 1);
        rows.push({ ids: row, w: rw, h: rh });
        cw = Math.max(cw, rw);
        ch += rh;
      }
      ch += L.rowGap * (rows.length - 1);
    } else {
      cw = 0;
      ch = 0;
      for (const kid of kids) {
        const k = measure(kid);
        cw = Math.max(cw, k.w);
        ch += k.h;
      }
      ch += L.gapV * (kids.length - 1);
    }
    const s = { w: Math.max(cw + 2 * L.pad, L.minFrameW), h: L.head + ch + L.pad, cw, ch, rows };
    size.set(id, s);
    return s;
  }

  const boxes = [];
  const edges = [];

  function place(id, x, y) {
    const node = model.nodes.get(id);
    const s = size.get(id);
    if (isLeaf(node)) {
      boxes.push({ kind: 'leaf', id, x, y, w: s.w, h: s.h });
      return;
    }
    const kids = model.kids(id);
    boxes.push({ kind: 'frame', id, x, y, w: s.w, h: s.h, empty: kids.length === 0 });
    const top = y + L.head;
    const left = x + (s.w - s.cw) / 2;
    if (kids.length === 0) return;
    if (collapsed.has(id)) {
      boxes.push({ kind: 'summary', id, x: left, y: top, w: L.sumW, h: L.sumH, count: kids.length });
      return;
    }
    if (s.rows) {
      let ry = top;
      for (const row of s.rows) {
        let rx = left;
        for (const kid of row.ids) {
          place(kid, rx, ry);
          rx += size.get(kid).w + L.gapH;
        }
        ry += row.h + L.rowGap;
      }
      return;
    }
    const cx = x + s.w / 2;
    let cy = top;
    let prevBottom = null;
    let label = null;
    if (node.type === 'continuation') label = node.on || 'then';
    else if (node.type === 'dynamic') label = 'spawns';
    kids.forEach((kid, i) => {
      const k = size.get(kid);
      if (prevBottom !== null) {
        edges.push({ x1: cx, y1: prevBottom, x2: cx, y2: cy, label: i === 1 ? label : null });
      }
      place(kid, cx - k.w / 2, cy);
      prevBottom = cy + k.h;
      cy += k.h + L.gapV;
    });
  }

  let width = 0;
  let height = L.margin;
  for (const root of model.roots) {
    const s = measure(root);
    width = Math.max(width, s.w);
  }
  for (const root of model.roots) {
    place(root, L.margin, height);
    height += size.get(root).h + L.gapV;
  }
  return { boxes, edges, collapsed, width: width + 2 * L.margin, height: Math.max(height - L.gapV + L.margin, 40) };
}

// MARK: - Drawing helpers

function svgEl(tag, attrs) {
  const e = document.createElementNS(SVG_NS, tag);
  if (attrs) for (const k in attrs) e.setAttribute(k, attrs[k]);
  return e;
}

function svgText(x, y, cls, text) {
  const t = svgEl('text', { x, y, class: cls });
  t.textContent = text;
  return t;
}

function charsFor(width, px) {
  return Math.max(4, Math.floor((width - 16) / px));
}

function leafSubtitle(node) {
  let s = node.action || node.type;
  if (node.executor && node.executor !== 'default') s += ' @' + node.executor;
  if (node.attempts > 1) s += ' · ×' + node.attempts;
  return s;
}

function frameTitle(model, node) {
  let s = node.id + ' · ' + node.type;
  const n = model.kids(node.id).length;
  if (node.type === 'map') s += ' · ' + n + (n === 1 ? ' instance' : ' instances');
  if (node.type === 'parallel') s += ' · ' + n + (n === 1 ? ' branch' : ' branches');
  return s;
}

export function countsLine(counts) {
  const parts = [];
  for (const s of NODE_STATES) if (counts[s]) parts.push(counts[s] + ' ' + s);
  return parts.join(' · ') || 'none yet';
}

// MARK: - Graph view

export class GraphView {
  // host: an element to draw into; onSelect(id, kind) is called with kind 'node' or 'summary'.
  constructor(host, onSelect) {
    this.host = host;
    this.onSelect = onSelect;
    this.scale = 1;
    this.svg = null;
    this.layout = null;
    this.groups = new Map();     // node id → <g> of a drawn node
    this.summaries = new Map();  // collapsed node id → {g, line1, line2, bars}
    this.selected = null;
    host.addEventListener('click', (e) => this.handleClick(e));
    host.addEventListener('keydown', (e) => {
      if (e.key !== 'Enter' && e.key !== ' ') return;
      if (this.handleClick(e)) e.preventDefault();
    });
  }

  handleClick(e) {
    const target = e.target instanceof Element ? e.target : null;
    if (!target) return false;
    const sum = target.closest('[data-summary-of]');
    if (sum) {
      this.onSelect(sum.getAttribute('data-summary-of'), 'summary');
      return true;
    }
    const g = target.closest('[data-node-id]');
    if (g && this.host.contains(g)) {
      this.onSelect(g.getAttribute('data-node-id'), 'node');
      return true;
    }
    return false;
  }

  // Draws the whole graph (a new layout). Keeps the scroll position, zoom and selection.
  render(model, layout, options = {}) {
    const first = !this.svg;
    const scrollLeft = this.host.scrollLeft;
    const scrollTop = this.host.scrollTop;
    this.layout = layout;
    this.groups = new Map();
    this.summaries = new Map();
    const svg = svgEl('svg', {
      class: 'graph', 'data-testid': 'graph-svg', role: 'img',
      viewBox: `0 0 ${layout.width} ${layout.height}`,
      'aria-label': 'Job graph with ' + model.size + ' nodes',
    });
    const defs = svgEl('defs');
    const marker = svgEl('marker', {
      id: 'arrow', viewBox: '0 0 10 10', refX: '9', refY: '5',
      markerWidth: '7', markerHeight: '7', orient: 'auto-start-reverse',
    });
    marker.appendChild(svgEl('path', { d: 'M0,0 L10,5 L0,10 z', class: 'arrowhead' }));
    defs.appendChild(marker);
    svg.appendChild(defs);

    const frames = svgEl('g', { class: 'frames' });
    const leaves = svgEl('g', { class: 'leaves' });
    const edgeLayer = svgEl('g', { class: 'edges' });
    const focusable = layout.boxes.length <= 3000;
    for (const box of layout.boxes) {
      const node = model.nodes.get(box.id);
      if (box.kind === 'summary') {
        frames.appendChild(this.drawSummary(model, box, focusable));
        continue;
      }
      const g = svgEl('g', {
        class: box.kind === 'leaf' ? 'node leaf' : 'node frame',
        transform: `translate(${box.x},${box.y})`,
        'data-testid': 'graph-node',
        'data-node-id': box.id,
        'data-node-type': node.type,
        'data-state': node.state,
      });
      if (focusable) {
        g.setAttribute('tabindex', '0');
        g.setAttribute('role', 'button');
      }
      const title = svgEl('title');
      title.textContent = `${box.id} (${node.action ? 'task: ' + node.action : node.type}) — ${node.state}`;
      g.appendChild(title);
      if (box.kind === 'leaf') {
        const compact = box.h < L.leafH;
        if (compact) g.setAttribute('data-w', String(box.w));
        g.appendChild(svgEl('rect', { class: 'box', width: box.w, height: box.h, rx: 6 }));
        g.appendChild(svgText(9, compact ? 17 : 19, 'l1', clip(box.id, charsFor(box.w, 7.2))));
        g.appendChild(svgText(9, compact ? 32 : 36, 'l2', clip(leafSubtitle(node), charsFor(box.w, 6.3))));
        leaves.appendChild(g);
      } else {
        g.appendChild(svgEl('rect', { class: 'frame-box', width: box.w, height: box.h, rx: 8 }));
        g.appendChild(svgText(9, 15, 'frame-label', clip(frameTitle(model, node), charsFor(box.w, 6.4))));
        if (box.empty) {
          const msg = node.type === 'map' ? 'no instances yet' : node.type === 'dynamic' ? 'nothing spawned yet' : 'empty';
          g.appendChild(svgText(box.w / 2, L.head + 17, 'empty-note', msg));
        }
        frames.appendChild(g);
      }
      this.groups.set(box.id, g);
    }
    for (const e of layout.edges) {
      edgeLayer.appendChild(svgEl('line', {
        x1: e.x1, y1: e.y1 + 1, x2: e.x2, y2: e.y2 - 2, class: 'edge', 'marker-end': 'url(#arrow)',
      }));
      if (e.label) edgeLayer.appendChild(svgText(e.x1 + 6, (e.y1 + e.y2) / 2 + 4, 'edge-label', clip(e.label, 16)));
    }
    svg.appendChild(frames);
    svg.appendChild(edgeLayer);
    svg.appendChild(leaves);

    this.svg = svg;
    this.host.replaceChildren(svg);
    if (first || options.fit) this.fit();
    else this.applyScale();
    if (!first) {
      this.host.scrollLeft = scrollLeft;
      this.host.scrollTop = scrollTop;
    }
    if (this.selected) this.markSelected(this.selected);
  }

  drawSummary(model, box, focusable) {
    const node = model.nodes.get(box.id);
    const g = svgEl('g', {
      class: 'summary', transform: `translate(${box.x},${box.y})`,
      'data-testid': 'graph-summary', 'data-summary-of': box.id,
    });
    if (focusable) {
      g.setAttribute('tabindex', '0');
      g.setAttribute('role', 'button');
    }
    g.appendChild(svgEl('rect', { class: 'summary-box', width: box.w, height: box.h, rx: 6 }));
    const noun = node.type === 'map' ? 'instances' : 'branches';
    const line1 = svgText(10, 19, 'l1', `${box.count} ${noun}`);
    const line2 = svgText(10, 37, 'l2', '');
    g.appendChild(line1);
    g.appendChild(line2);
    const bars = {};
    const barY = box.h - 20;
    g.appendChild(svgEl('rect', { class: 'bar-bg', x: 10, y: barY, width: box.w - 20, height: 9, rx: 2 }));
    for (const s of NODE_STATES) {
      const r = svgEl('rect', { class: 'bar', 'data-state': s, x: 10, y: barY, width: 0, height: 9 });
      bars[s] = r;
      g.appendChild(r);
    }
    const hint = svgText(box.w - 10, 19, 'hint', 'details ›');
    g.appendChild(hint);
    const entry = { g, line1, line2, bars, w: box.w - 20, noun };
    this.summaries.set(box.id, entry);
    this.updateSummary(box.id, model.childCounts(box.id), box.count);
    return g;
  }

  updateSummary(id, counts, total) {
    const s = this.summaries.get(id);
    if (!s) return;
    let n = total;
    if (n === undefined) n = NODE_STATES.reduce((a, k) => a + (counts[k] || 0), 0);
    s.line1.textContent = `${n} ${s.noun}`;
    s.line2.textContent = clip(countsLine(counts), 40);
    let x = 10;
    for (const st of NODE_STATES) {
      const w = n ? (s.w * (counts[st] || 0)) / n : 0;
      s.bars[st].setAttribute('x', x.toFixed(1));
      s.bars[st].setAttribute('width', w.toFixed(1));
      x += w;
    }
    const done = settledCount(counts);
    s.g.setAttribute('data-done', String(done));
  }

  // Updates one drawn node's state; returns false when the node is not drawn.
  setState(id, node) {
    const g = this.groups.get(id);
    if (!g) return false;
    if (g.getAttribute('data-state') !== node.state) g.setAttribute('data-state', node.state);
    if (isLeaf(node)) {
      const l2 = g.querySelector('.l2');
      const text = clip(leafSubtitle(node), charsFor(Number(g.getAttribute('data-w')) || L.leafW, 6.3));
      if (l2 && l2.textContent !== text) l2.textContent = text;
    }
    const title = g.firstChild;
    if (title) title.textContent = `${id} (${node.action ? 'task: ' + node.action : node.type}) — ${node.state}`;
    return true;
  }

  isDrawn(id) {
    return this.groups.has(id);
  }

  markSelected(id) {
    if (this.svg) for (const e of this.svg.querySelectorAll('.selected')) e.classList.remove('selected');
    this.selected = id;
    if (!id) return;
    const g = this.groups.get(id) || (this.summaries.get(id) && this.summaries.get(id).g);
    if (g) g.classList.add('selected');
  }

  scrollTo(id) {
    const box = this.layout && this.layout.boxes.find((b) => b.id === id && b.kind !== 'summary');
    if (!box) return;
    const x = box.x * this.scale - this.host.clientWidth / 2 + (box.w * this.scale) / 2;
    const y = box.y * this.scale - this.host.clientHeight / 2 + (box.h * this.scale) / 2;
    this.host.scrollTo({ left: Math.max(0, x), top: Math.max(0, y) });
  }

  applyScale() {
    if (!this.svg || !this.layout) return;
    this.svg.setAttribute('width', String(Math.ceil(this.layout.width * this.scale)));
    this.svg.setAttribute('height', String(Math.ceil(this.layout.height * this.scale)));
    this.host.setAttribute('data-scale', this.scale.toFixed(2));
  }

  zoom(factor) {
    this.scale = Math.min(3, Math.max(0.1, this.scale * factor));
    this.applyScale();
  }

  actualSize() {
    this.scale = 1;
    this.applyScale();
  }

  // Fits the width of the graph (never above 100%, never below 35% — scroll for the rest).
  fit() {
    if (!this.layout) return;
    const avail = Math.max(200, this.host.clientWidth - 4);
    this.scale = Math.max(0.35, Math.min(1, avail / this.layout.width));
    this.applyScale();
  }
}

// MARK: - Timeline (Gantt)

const TL = { row: 20, label: 230, axis: 24, right: 16, maxRows: 400 };

// Rows: the task nodes in graph order; a collapsed map or parallel is one row spanning its
// instances. Returns [{id, label, start, end, state, retries, aggregate?}].
export function timelineRows(model, collapsed) {
  const rows = [];
  let total = 0;
  const stack = model.roots.slice().reverse();
  while (stack.length) {
    const id = stack.pop();
    const node = model.nodes.get(id);
    if (collapsed && collapsed.has(id)) {
      total += 1;
      if (rows.length < TL.maxRows) {
        const n = model.kids(id).length;
        rows.push({
          id, label: `${id} (${n} ${node.type === 'map' ? 'instances' : 'branches'})`,
          start: node.startedAt, end: node.finishedAt, state: node.state, aggregate: true,
        });
      }
      continue;
    }
    if (isLeaf(node)) {
      total += 1;
      if (rows.length < TL.maxRows) {
        rows.push({
          id, label: id, start: node.startedAt, end: node.finishedAt, state: node.state,
          retries: model.retries.get(id),
        });
      }
      continue;
    }
    const kids = model.kids(id);
    for (let i = kids.length - 1; i >= 0; i--) stack.push(kids[i]);
  }
  return { rows, total };
}

function niceStep(span, target) {
  const raw = span / target;
  const steps = [1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10000, 15000, 30000, 60000,
    120000, 300000, 600000, 900000, 1800000, 3600000, 7200000, 21600000, 43200000, 86400000];
  for (const s of steps) if (s >= raw) return s;
  return steps[steps.length - 1];
}

// Draws the timeline into host. t0/t1: the time range (ms since epoch).
export function drawTimeline(host, data, t0, t1, selected) {
  const width = Math.max(600, host.clientWidth || 900);
  const plotW = width - TL.label - TL.right;
  const rows = data.rows;
  const height = TL.axis + rows.length * TL.row + 8;
  const span = Math.max(1, t1 - t0);
  const px = (t) => TL.label + ((t - t0) / span) * plotW;
  const svg = svgEl('svg', {
    class: 'timeline', width, height, viewBox: `0 0 ${width} ${height}`, 'data-testid': 'timeline-svg',
  });
  const axis = svgEl('g', { class: 'axis' });
  const step = niceStep(span, Math.max(2, Math.floor(plotW / 110)));
  for (let t = 0; t <= span + 0.5; t += step) {
    const x = px(t0 + t);
    axis.appendChild(svgEl('line', { x1: x, y1: TL.axis - 6, x2: x, y2: height, class: 'tick' }));
    if (x + 48 <= width) axis.appendChild(svgText(x + 3, TL.axis - 10, 'tick-label', formatOffset(t)));
  }
  svg.appendChild(axis);
  const body = svgEl('g');
  rows.forEach((row, i) => {
    const y = TL.axis + i * TL.row;
    const g = svgEl('g', {
      class: 'tl-row' + (row.id === selected ? ' selected' : ''), 'data-testid': 'timeline-row',
      'data-task-id': row.id, 'data-state': row.state, transform: `translate(0,${y})`,
    });
    if (i % 2 === 1) g.appendChild(svgEl('rect', { class: 'stripe', x: 0, y: 0, width, height: TL.row }));
    g.appendChild(svgText(6, 14, 'tl-label' + (row.aggregate ? ' aggregate' : ''), clip(row.label, 32)));
    if (row.start) {
      const s = Date.parse(row.start);
      const e = row.end ? Date.parse(row.end) : t1;
      const x = px(s);
      const w = Math.max(2, px(e) - x);
      const bar = svgEl('rect', { class: 'tl-bar', 'data-state': row.state, x, y: 4, width: w, height: TL.row - 8, rx: 2 });
      const title = svgEl('title');
      title.textContent = `${row.id}: ${row.state}, ${formatOffset(e - s)}${row.end ? '' : ' so far'}`;
      bar.appendChild(title);
      g.appendChild(bar);
      if (row.retries) {
        for (const r of row.retries) {
          const rx = px(Date.parse(r));
          g.appendChild(svgEl('line', { class: 'retry-mark', x1: rx, y1: 2, x2: rx, y2: TL.row - 2 }));
        }
      }
    }
    body.appendChild(g);
  });
  svg.appendChild(body);
  host.replaceChildren(svg);
}

// node-details.js — the node panel of a job's page (job-view.js): the selected node (fields, what
// it waits for, progress, result, error, children, cancel, the form that completes an await task)
// or the summary of a collapsed map or parallel (counts by state, its children filtered by state,
// expand).

import { api, ApiError, isAbort, problemText, taskPath } from './api.js';
import { confirmAction, toast } from './dialogs.js';
import { badge, compactJSON, duration, fmtTime, h, jsonText, progressBar } from './dom.js';
import { COLLAPSE_MAP_OVER, COLLAPSE_PARALLEL_OVER, countsLine, EXPANDABLE_UP_TO } from './graph.js';
import { isLeaf, NODE_STATES, stateRank, TERMINAL_NODE_STATES, waitWords } from './states.js';

export class NodeDetails {
  // page: the JobPage (model, graph, layout, expanded, jobId, ctx, scheduleFrame(), nodeLink(id));
  // host: the panel.
  constructor(page, host) {
    this.page = page;
    this.host = host;
    this.selected = null; // {id, kind: 'node'|'summary'}
    this.key = ''; // what the panel shows: it is redrawn when that changes
    this.fetching = false;
    this.again = false;
    this.summaryFilter = ''; // a state, to list only the children in it
  }

  select(id, kind) {
    const { page } = this;
    const graph = page.graph;
    if (!page.model.nodes.has(id)) return;
    this.selected = { id, kind };
    this.key = '';
    // A node inside a collapsed map is not drawn: its summary is highlighted instead.
    let shown = id;
    while (shown && !graph.isDrawn(shown) && !(page.layout && page.layout.collapsed.has(shown))) {
      const n = page.model.nodes.get(shown);
      shown = n && n.parent;
    }
    graph.markSelected(shown || null);
    if (kind === 'node' && graph.isDrawn(id)) graph.scrollTo(id);
    page.timelineDirty = true;
    page.scheduleFrame();
    this.refresh(true);
  }

  // Redraws the panel; for a node, reads it from the server (one read at a time) and keeps the
  // newer of that and the page's copy. immediate: draw the page's copy first.
  async refresh(immediate) {
    const { page } = this;
    const sel = this.selected;
    if (!sel) return;
    if (sel.kind === 'summary') {
      this.renderSummary(sel.id);
      return;
    }
    const cached = page.model.nodes.get(sel.id);
    if (immediate && cached) this.renderNode(cached);
    if (this.fetching) {
      this.again = true;
      return;
    }
    this.fetching = true;
    try {
      const node = await api(taskPath(page.jobId, sel.id), { signal: page.ctx.signal });
      if (this.selected && this.selected.id === node.id) {
        const mine = page.model.nodes.get(node.id);
        if (mine && (stateRank(node.state) >= stateRank(mine.state))) {
          Object.assign(mine, node);
          // Present only while the attempt waits: absent from the answer, it no longer does.
          if (!('waitingFor' in node)) delete mine.waitingFor;
        }
        this.renderNode(mine || node);
      }
    } catch (e) {
      if (!isAbort(e) && !page.ctx.closed && !(e instanceof ApiError && e.status === 404)) toast(problemText(e), 'error');
    } finally {
      this.fetching = false;
      if (this.again && !page.ctx.closed) {
        this.again = false;
        this.refresh(false);
      }
    }
  }

  renderNode(node) {
    const { page } = this;
    const key = compactJSON([node.id, node.state, node.attempts, node.result !== undefined, Boolean(node.error), node.workerId, node.progress, node.finishedAt, node.waitingFor, page.expanded.has(node.id)]);
    if (key === this.key) return;
    this.key = key;
    const terminal = TERMINAL_NODE_STATES.has(node.state);
    const rows = [
      ['Type', node.type], ['Action', node.action], ['Executor', node.executor],
      ['Attempts', isLeaf(node) ? String(node.attempts ?? 0) : undefined],
      ['Started', node.startedAt ? fmtTime(node.startedAt) : '—'], ['Finished', node.finishedAt ? fmtTime(node.finishedAt) : '—'],
      ['Duration', node.startedAt ? duration(node.startedAt, node.finishedAt) : '—'],
      ['Worker', node.workerId],
    ];
    const dl = h('dl', { class: 'meta' });
    for (const [k, v] of rows) if (v !== undefined && v !== null) dl.append(h('dt', null, k), h('dd', { class: k === 'Worker' ? 'mono' : '' }, v));
    if (node.parent) dl.append(h('dt', null, 'Parent'), h('dd', null, page.nodeLink(node.parent)));
    if (node.type === 'job') {
      // The child jobs this node started (one per attempt), by the labels the server gives them.
      const filter = 'parent:' + page.jobId + ',parentTask:' + node.id;
      dl.append(h('dt', null, 'Child jobs'), h('dd', null,
        h('a', { href: '#/?label=' + encodeURIComponent(filter), testid: 'details-children' }, 'the children of this node')));
    }
    const parts = [
      h('div', { class: 'details-head' }, h('h2', { class: 'mono', testid: 'details-title' }, node.id), badge(node.state, 'details-state')),
      dl,
    ];
    if (node.waitingFor && !terminal) {
      parts.splice(1, 0, h('p', { class: 'waiting', testid: 'details-waiting', 'data-waiting-for': node.waitingFor,
        title: 'Live: no event announces a wait; the page reads the node again every 2 seconds while its job says something waits.' },
      waitWords(node.waitingFor).replace(/^w/, 'W')));
    }
    if (node.progress !== undefined) parts.push(h('h3', null, 'Progress'), h('pre', { testid: 'details-progress' }, jsonText(node.progress, 20000)));
    if (node.result !== undefined) parts.push(h('h3', null, 'Result'), h('pre', { testid: 'details-result' }, jsonText(node.result)));
    if (node.error) {
      parts.push(h('h3', null, 'Error'), h('div', { class: 'error-box', testid: 'details-error' },
        h('strong', null, node.error.code), ': ', node.error.message || '',
        node.error.details !== undefined ? h('pre', null, jsonText(node.error.details, 20000)) : null));
    }
    if (isLeaf(node)) parts.push(h('p', { class: 'muted small' }, 'A task\'s input is not recorded; it is its parent\'s input or the previous step\'s result (see the job input and the results above it).'));
    const kids = page.model.kids(node.id);
    if (kids.length) {
      if ((node.type === 'map' || node.type === 'parallel') && page.layout) {
        const collapsed = page.layout.collapsed.has(node.id);
        if (collapsed && kids.length <= EXPANDABLE_UP_TO) {
          parts.push(h('button', { type: 'button', class: 'small', testid: 'expand-node', onclick: () => this.toggleExpanded(node.id, true) }, `Draw all ${kids.length}`));
        } else if (page.expanded.has(node.id)) {
          parts.push(h('button', { type: 'button', class: 'small', testid: 'collapse-node', onclick: () => this.toggleExpanded(node.id, false) }, 'Collapse into a summary'));
        }
      }
      parts.push(h('h3', null, `Children (${kids.length})`), this.childList(kids, ''));
    }
    const actions = h('div', { class: 'actions' });
    if (!terminal) {
      actions.appendChild(h('button', { type: 'button', class: 'danger', testid: 'cancel-task', onclick: () => this.cancelTask(node) }, 'Cancel node'));
    }
    parts.push(actions);
    if (node.action === 'await') {
      if (node.state === 'running') parts.push(awaitForm(node, (body) => this.complete(node, body)));
      else if (node.state === 'pending') parts.push(h('p', { class: 'muted small' }, 'This await task has not started: it can be completed once it runs.'));
    }
    this.host.replaceChildren(...parts);
  }

  // The first 100 of ids (those in stateFilter, when given), each a link that selects it.
  childList(ids, stateFilter) {
    const { page } = this;
    const list = h('ul', { class: 'child-list', testid: 'child-list' });
    let shown = 0;
    let matching = 0;
    for (const id of ids) {
      const n = page.model.nodes.get(id);
      if (stateFilter && n.state !== stateFilter) continue;
      matching += 1;
      if (shown >= 100) continue;
      shown += 1;
      list.appendChild(h('li', null, h('span', { class: 'dot', 'data-state': n.state, title: n.state }), page.nodeLink(id)));
    }
    if (matching > shown) list.appendChild(h('li', { class: 'muted small' }, `… and ${matching - shown} more`));
    if (!matching) list.appendChild(h('li', { class: 'muted small' }, 'none'));
    return list;
  }

  renderSummary(id) {
    const { page } = this;
    const node = page.model.nodes.get(id);
    const kids = page.model.kids(id);
    const counts = page.model.childCounts(id);
    const key = compactJSON(['summary', id, counts, kids.length, this.summaryFilter || '']);
    if (key === this.key) return;
    this.key = key;
    const noun = node.type === 'map' ? 'instances' : 'branches';
    const filter = h('select', { testid: 'summary-filter' }, h('option', { value: '' }, 'all states'),
      NODE_STATES.map((s) => h('option', { value: s, selected: this.summaryFilter === s }, `${s} (${counts[s] || 0})`)));
    const listHost = h('div', null, this.childList(kids, this.summaryFilter || ''));
    filter.addEventListener('change', () => {
      this.summaryFilter = filter.value;
      this.key = '';
      this.renderSummary(id);
    });
    const parts = [
      h('div', { class: 'details-head' }, h('h2', { class: 'mono', testid: 'details-title' }, `${id}: ${kids.length} ${noun}`), badge(node.state, 'details-state')),
      h('p', { class: 'small' }, countsLine(counts)),
      progressBar(Object.assign({ total: kids.length }, counts)),
      h('p', { class: 'muted small' }, `Drawn as one box because there are more than ${node.type === 'map' ? COLLAPSE_MAP_OVER : COLLAPSE_PARALLEL_OVER} ${noun}. Pick one to see its details:`),
      h('label', { class: 'small' }, 'Show ', filter), listHost,
      h('div', { class: 'actions' },
        h('button', { type: 'button', class: 'small', onclick: () => this.select(id, 'node') }, `The ${node.type} node itself`),
        kids.length <= EXPANDABLE_UP_TO ? h('button', { type: 'button', class: 'small', testid: 'expand-node', onclick: () => this.toggleExpanded(id, true) }, `Draw all ${kids.length}`) : null),
    ];
    this.host.replaceChildren(...parts);
  }

  // Draws a collapsed map or parallel in full (on) or as its summary again; the page relayouts.
  toggleExpanded(id, on) {
    const { page } = this;
    if (on) page.expanded.add(id);
    else page.expanded.delete(id);
    page.relayout = true;
    this.selected = { id, kind: 'node' };
    this.key = '';
    page.scheduleFrame();
  }

  async cancelTask(node) {
    const { page } = this;
    const ok = await confirmAction({
      title: 'Cancel this node?',
      message: [h('p', null, 'Node ', h('strong', { class: 'mono' }, node.id), ' and everything under it will be cancelled.'),
        h('p', null, 'The cancellation then follows the graph\'s rules (a series ends cancelled, an "any" parallel carries on…).')],
      ok: 'Cancel node',
    });
    if (!ok) return;
    try {
      await api(taskPath(page.jobId, node.id, '/cancel'), { method: 'POST', signal: page.ctx.signal });
      toast('Cancellation of the node requested.');
      this.key = '';
      this.refresh(false);
    } catch (e) {
      if (!isAbort(e)) toast(problemText(e), 'error');
    }
  }

  // Completes the await task node with body ({result} or {error}) and shows the outcome.
  async complete(node, body) {
    const { page } = this;
    const done = await api(taskPath(page.jobId, node.id, '/complete'), { method: 'POST', body, signal: page.ctx.signal });
    toast(`Task ${done.id} ${done.state}.`);
    const mine = page.model.nodes.get(done.id);
    if (mine) {
      Object.assign(mine, done);
      page.dirty.add(done.id);
    }
    this.key = '';
    this.renderNode(mine || done);
    page.scheduleFrame();
  }
}

// The form that completes a running await task: with a result (any JSON) or an error (code and
// message), after a confirmation. complete(body) sends it; its failure shows in the form.
function awaitForm(node, complete) {
  const modeResult = h('input', { type: 'radio', name: 'await-mode', value: 'result', checked: true, testid: 'await-mode-result' });
  const modeError = h('input', { type: 'radio', name: 'await-mode', value: 'error', testid: 'await-mode-error' });
  const result = h('textarea', { rows: '5', spellcheck: 'false', testid: 'await-result', placeholder: '{"approved": true}', class: 'mono' });
  result.value = '';
  const code = h('input', { type: 'text', testid: 'await-error-code', placeholder: 'approval.denied', autocomplete: 'off' });
  const message = h('input', { type: 'text', testid: 'await-error-message', placeholder: 'Rejected by reviewer', autocomplete: 'off' });
  const resultBox = h('label', { class: 'block' }, 'Result (any JSON)', result);
  const errorBox = h('div', { hidden: true }, h('label', { class: 'block' }, 'Error code', code), h('label', { class: 'block' }, 'Message', message));
  const problem = h('p', { class: 'form-error', testid: 'await-form-error', role: 'alert' });
  const submit = h('button', { type: 'submit', class: 'primary', testid: 'await-submit' }, 'Complete task…');
  const form = h('form', { class: 'await-form', testid: 'await-form', novalidate: true },
    h('h3', null, 'Complete this await task'),
    h('div', { class: 'radios' }, h('label', null, modeResult, ' with a result'), h('label', null, modeError, ' with an error')),
    resultBox, errorBox, problem, submit);
  const sync = () => {
    resultBox.hidden = !modeResult.checked;
    errorBox.hidden = modeResult.checked;
    problem.textContent = '';
  };
  modeResult.addEventListener('change', sync);
  modeError.addEventListener('change', sync);
  form.addEventListener('submit', async (e) => {
    e.preventDefault();
    problem.textContent = '';
    let body;
    let preview;
    if (modeResult.checked) {
      const text = result.value.trim();
      if (!text) {
        problem.textContent = 'Enter a JSON value (for example null, 42, "ok" or {"approved": true}).';
        return;
      }
      let value;
      try {
        value = JSON.parse(text);
      } catch (err) {
        problem.textContent = 'The result is not valid JSON: ' + err.message;
        return;
      }
      body = { result: value };
      preview = h('pre', null, jsonText(value, 2000));
    } else {
      if (!code.value.trim()) {
        problem.textContent = 'An error needs a code.';
        return;
      }
      body = { error: { code: code.value.trim(), message: message.value } };
      preview = h('pre', null, `${body.error.code}: ${body.error.message}`);
    }
    const ok = await confirmAction({
      title: modeResult.checked ? 'Complete the task with this result?' : 'Fail the task with this error?',
      message: [h('p', null, 'Await task ', h('strong', { class: 'mono' }, node.id), modeResult.checked ? ' will succeed with:' : ' will fail with:'), preview,
        h('p', null, 'The first completion wins; this cannot be undone.')],
      ok: modeResult.checked ? 'Complete task' : 'Fail task',
      danger: !modeResult.checked,
    });
    if (!ok) return;
    submit.disabled = true;
    try {
      await complete(body);
    } catch (err) {
      if (isAbort(err)) return;
      problem.textContent = problemText(err);
      submit.disabled = false;
    }
  });
  return form;
}

// job-view.js — #/jobs/{id}: one job. A JobPage holds the view's state and draws it: the head
// (name, state, priority, times, what waits, progress, cancel or delete, the outcome), the graph
// (graph.js), redrawn at most once a frame from what events marked changed, the timeline (at most
// twice a second) and the webhook deliveries. Its event stream and events table are in
// job-events.js, the node panel in node-details.js.

import { api, ApiError, isAbort, jobPath, problemText } from './api.js';
import { confirmAction, toast } from './dialogs.js';
import { clip, duration, fmtTime, h, jsonText, labelChips, progressBar } from './dom.js';
import { countsLine, drawTimeline, GraphView, JobModel, layoutGraph, timelineRows } from './graph.js';
import { JobEvents } from './job-events.js';
import { NodeDetails } from './node-details.js';
import { jobWaits, NODE_STATES, stateRank, tasksWaitingText, TERMINAL_JOB_STATES, TERMINAL_NODE_STATES, waitWords } from './states.js';

// Waits (for a concurrency key, a rate-limit token, a slot) are live only: no event announces
// one. While the job says something waits, the page re-reads it (and the selected node) every
// WAIT_POLL_MS; see watchWaits().
const WAIT_POLL_MS = 2000;
const WAIT_AFTER_EVENT_MS = 300;
// Fields of a job representation that are only present while they hold: a full representation
// without one says it no longer does.
const LIVE_JOB_FIELDS = ['waitingFor', 'tasksWaiting'];

export async function jobView(root, jobId, ctx) {
  document.title = 'Job · TaskServer';
  const page = new JobPage(root, jobId, ctx);
  await page.load();
}

// The page's elements, built before the data arrives (the page has its shape at once).
function jobSkeleton() {
  const el = {
    title: h('h1', { class: 'job-name', testid: 'job-name' }, '…'),
    stateBadge: h('span', { class: 'badge', testid: 'job-state' }, '…'),
    meta: h('dl', { class: 'meta' }),
    waiting: h('p', { class: 'waiting', testid: 'job-waiting', hidden: true,
      title: 'Live: no event announces a wait, so the page re-reads the job every 2 seconds while something waits.' }),
    progressHost: h('div', { class: 'job-progress', testid: 'job-progress' }),
    cancelJobButton: h('button', { type: 'button', class: 'danger', testid: 'cancel-job', hidden: true }, 'Cancel job'),
    deleteJobButton: h('button', { type: 'button', class: 'danger', testid: 'delete-job', hidden: true }, 'Delete job'),
    redriveButton: h('button', { type: 'button', testid: 'redrive-job', hidden: true, title: 'Run the failed, cancelled and skipped nodes again; succeeded ones keep their results.' }, 'Redrive'),
    streamState: h('span', { class: 'live', testid: 'job-live', 'data-live': 'connecting' }, 'connecting…'),
    outcome: h('div', { class: 'outcome', testid: 'job-outcome' }),
    graphHost: h('div', { class: 'graph-host', testid: 'graph', tabindex: '-1' }, h('p', { class: 'muted pad' }, 'Loading the graph…')),
    details: h('aside', { class: 'details card', testid: 'node-details' }, h('p', { class: 'muted' }, 'Click a node to see its details.')),
    timelineHost: h('div', { class: 'timeline-host', testid: 'timeline' }),
    timelineNote: h('p', { class: 'muted small' }),
    eventsBody: h('tbody', { testid: 'events-body' }),
    eventsNote: h('p', { class: 'muted small', testid: 'events-note' }),
    deliveriesHost: h('div', { testid: 'deliveries' }, h('p', { class: 'muted' }, 'Loading…')),
    refreshDeliveriesButton: h('button', { type: 'button', class: 'small', testid: 'refresh-deliveries' }, 'Refresh'),
    zoomBar: h('div', { class: 'toolbar' },
      h('button', { type: 'button', class: 'small', testid: 'zoom-out', title: 'Zoom out', 'aria-label': 'Zoom out' }, '−'),
      h('button', { type: 'button', class: 'small', testid: 'zoom-in', title: 'Zoom in', 'aria-label': 'Zoom in' }, '+'),
      h('button', { type: 'button', class: 'small', testid: 'zoom-fit' }, 'Fit'),
      h('button', { type: 'button', class: 'small', testid: 'zoom-reset' }, '100%'),
      h('span', { class: 'legend' }, NODE_STATES.map((s) => h('span', { class: 'legend-item' }, h('span', { class: 'dot', 'data-state': s }), s)))),
  };
  el.page = h('div', { class: 'job-page' },
    h('p', { class: 'crumbs' }, h('a', { href: '#/' }, '← Jobs')),
    h('section', { class: 'card job-head' },
      h('div', { class: 'title-row' }, el.title, el.stateBadge, el.streamState),
      el.meta, el.waiting, el.progressHost,
      h('div', { class: 'actions' }, el.cancelJobButton, el.deleteJobButton, el.redriveButton),
      el.outcome),
    h('div', { class: 'job-main' },
      h('section', { class: 'card graph-card' }, h('div', { class: 'card-head' }, h('h2', null, 'Graph'), el.zoomBar), el.graphHost),
      el.details),
    h('section', { class: 'card' }, h('div', { class: 'card-head' }, h('h2', null, 'Timeline')), el.timelineHost, el.timelineNote),
    h('section', { class: 'card' }, h('div', { class: 'card-head' }, h('h2', null, 'Events')),
      h('div', { class: 'table-wrap events-wrap' }, h('table', { class: 'events', testid: 'events-table' },
        h('thead', null, h('tr', null, ['#', 'Time', 'Type', 'Node', 'Data'].map((t) => h('th', null, t)))), el.eventsBody)),
      el.eventsNote),
    h('section', { class: 'card' }, h('div', { class: 'card-head' }, h('h2', null, 'Webhook deliveries'), el.refreshDeliveriesButton), el.deliveriesHost));
  return el;
}

class JobPage {
  constructor(root, jobId, ctx) {
    this.jobId = jobId;
    this.ctx = ctx;
    this.job = null; // GET /v1/jobs/{id}, kept up to date by the events
    this.model = new JobModel(); // its nodes (graph.js)
    this.layout = null; // the drawn layout (graph.js layoutGraph)
    this.expanded = new Set(); // collapsed maps and parallels the user asked to draw in full
    this.ended = false; // the job is in a final state
    this.terminalAtLoad = false; // … and was when the page loaded it
    // What the next frame redraws (flush).
    this.frame = 0;
    this.dirty = new Set(); // ids of nodes whose state changed
    this.allDirty = false; // every node may have changed (a new snapshot of the same nodes)
    this.relayout = false; // nodes came or went, or a map was expanded: a new layout
    this.timelineDirty = true;
    this.lastTimeline = 0;
    this.timelineTimer = 0;
    // Re-reads of the nodes (scheduleRefetch).
    this.refetchTimer = 0;
    this.refetching = false;
    this.refetchAgain = false;
    this.lastRefetch = 0;
    // Re-reads of the job while something waits (watchWaits).
    this.waitTimer = 0;
    this.waitReading = false;
    this.waitAgain = false;
    this.waitHidden = false; // a read was skipped while the tab was hidden
    this.lastWaitRead = 0;

    this.el = jobSkeleton();
    root.appendChild(this.el.page);
    this.graph = new GraphView(this.el.graphHost, (id, kind) => this.select(id, kind));
    this.details = new NodeDetails(this, this.el.details);
    this.events = new JobEvents(this, this.el);
    const graph = this.graph;
    const zoomBar = this.el.zoomBar;
    zoomBar.querySelector('[data-testid=zoom-out]').addEventListener('click', () => graph.zoom(1 / 1.25));
    zoomBar.querySelector('[data-testid=zoom-in]').addEventListener('click', () => graph.zoom(1.25));
    zoomBar.querySelector('[data-testid=zoom-fit]').addEventListener('click', () => graph.fit());
    zoomBar.querySelector('[data-testid=zoom-reset]').addEventListener('click', () => graph.actualSize());
    this.el.timelineHost.addEventListener('click', (e) => {
      const row = e.target instanceof Element && e.target.closest('[data-task-id]');
      if (row) this.select(row.getAttribute('data-task-id'), this.layout && this.layout.collapsed.has(row.getAttribute('data-task-id')) ? 'summary' : 'node');
    });
  }

  // The two reads the graph needs, at once; then the rest: events (history and live),
  // deliveries, the timeline.
  async load() {
    const { ctx, jobId } = this;
    const [job, tasks] = await Promise.all([
      api(jobPath(jobId), { signal: ctx.signal }),
      api(jobPath(jobId, '/tasks'), { signal: ctx.signal }),
    ]);
    if (ctx.closed) return;
    this.job = job;
    // A job with job nodes starts child jobs: the head links to their list.
    this.startsChildren = tasks.items.some((n) => n.type === 'job');
    this.model.setNodes(tasks.items);
    this.ended = TERMINAL_JOB_STATES.has(job.state);
    this.terminalAtLoad = this.ended;
    this.renderHead();
    this.layoutAndDraw(true);
    this.markDrawn();
    this.lastWaitRead = performance.now();
    if (jobWaits(job)) this.watchWaits();

    ctx.timeout(() => {
      this.events.start();
      this.loadDeliveries();
      this.timelineDirty = true;
      this.scheduleFrame();
    }, 0);
    ctx.interval(() => {
      if (!this.ended) {
        this.timelineDirty = true;
        this.scheduleFrame();
      }
    }, 1000);
    ctx.onClose(() => {
      if (this.frame) cancelAnimationFrame(this.frame);
      if (this.refetchTimer) clearTimeout(this.refetchTimer);
      if (this.timelineTimer) clearTimeout(this.timelineTimer);
      if (this.waitTimer) clearTimeout(this.waitTimer);
    });
    const onVisibility = () => {
      if (!document.hidden && this.waitHidden) {
        this.waitHidden = false;
        this.watchWaits();
      }
    };
    document.addEventListener('visibilitychange', onVisibility);
    ctx.onClose(() => document.removeEventListener('visibilitychange', onVisibility));
    this.el.cancelJobButton.addEventListener('click', () => this.cancelJob());
    this.el.deleteJobButton.addEventListener('click', () => this.deleteJob());
    this.el.redriveButton.addEventListener('click', () => this.redriveJob());
    this.el.refreshDeliveriesButton.addEventListener('click', () => this.loadDeliveries());
  }

  // A marker for tests and measurements: when the graph is in the page and a frame has passed.
  markDrawn() {
    requestAnimationFrame(() => setTimeout(() => {
      if (this.ctx.closed) return;
      document.body.dataset.graphJob = this.jobId;
      document.body.dataset.graphNodes = String(this.model.size);
      document.body.dataset.graphDrawnAt = performance.now().toFixed(1);
      performance.mark('graph-drawn');
    }, 0));
  }

  select(id, kind) {
    this.details.select(id, kind);
  }

  // A button naming a node that selects it.
  nodeLink(id) {
    return h('button', { type: 'button', class: 'link mono', 'data-goto': id, onclick: () => this.select(id, 'node') }, id);
  }

  // MARK: - Head

  // Merges a patch (from an event) or a full representation (from the API: it has an id) into
  // the job, never moving it back.
  mergeJob(j) {
    if (!j) return;
    if (stateRank(j.state) < stateRank(this.job.state)) return;
    const next = Object.assign({}, this.job, j);
    if (j.id) for (const k of LIVE_JOB_FIELDS) if (!(k in j)) delete next[k];
    this.job = next;
    if (TERMINAL_JOB_STATES.has(this.job.state)) this.ended = true;
    this.renderHead();
  }

  renderHead() {
    const j = this.job;
    const { title, stateBadge, meta, cancelJobButton, deleteJobButton, redriveButton, outcome } = this.el;
    const name = j.name !== undefined && j.name !== '' ? j.name : '(unnamed job)';
    title.textContent = name;
    title.classList.toggle('muted', !j.name);
    document.title = clip(name, 60) + ' · TaskServer';
    stateBadge.textContent = j.state;
    stateBadge.setAttribute('data-state', j.state);
    meta.replaceChildren(
      h('dt', null, 'Id'), h('dd', { class: 'mono' }, j.id),
      ...(j.priority !== undefined ? [h('dt', null, 'Priority'), h('dd', { testid: 'job-priority', title: '0–9, default 5: within each pool, higher priorities start first' }, String(j.priority))] : []),
      h('dt', null, 'Created'), h('dd', null, fmtTime(j.createdAt)),
      ...(j.runAt ? [h('dt', null, 'Runs at'), h('dd', { testid: 'job-run-at' }, fmtTime(j.runAt))] : []),
      h('dt', null, 'Started'), h('dd', null, fmtTime(j.startedAt)),
      h('dt', null, 'Finished'), h('dd', null, fmtTime(j.finishedAt)),
      h('dt', null, 'Duration'), h('dd', { testid: 'job-duration' }, duration(j.startedAt, j.finishedAt)),
      h('dt', null, 'Labels'), h('dd', null, labelChips(j.labels)),
      ...(j.parentJobId ? [h('dt', null, 'Parent'), h('dd', { testid: 'job-parent' },
        h('a', { href: '#/jobs/' + encodeURIComponent(j.parentJobId), class: 'mono' }, j.parentJobId),
        ' (node ', j.parentTaskId || '', ')')] : []),
      ...(this.startsChildren ? [h('dt', null, 'Children'), h('dd', null,
        h('a', { href: '#/?label=' + encodeURIComponent('parent:' + j.id), testid: 'job-children' }, 'child jobs'))] : []));
    this.renderWaiting();
    this.renderProgress();
    const terminal = TERMINAL_JOB_STATES.has(j.state);
    cancelJobButton.hidden = terminal;
    deleteJobButton.hidden = !terminal;
    redriveButton.hidden = j.state !== 'failed' && j.state !== 'cancelled';
    const parts = [];
    if (j.error) {
      parts.push(h('div', { class: 'error-box', testid: 'job-error' },
        h('strong', null, j.error.code), ': ', j.error.message || '',
        j.error.taskId ? h('span', null, ' (node ', this.nodeLink(j.error.taskId), ')') : null,
        j.error.details !== undefined ? h('pre', null, jsonText(j.error.details, 20000)) : null));
    }
    if (j.result !== undefined) {
      parts.push(h('details', { class: 'json-box', testid: 'job-result' }, h('summary', null, 'Result'), h('pre', null, jsonText(j.result))));
    }
    if (j.input !== undefined && j.input !== null) {
      parts.push(h('details', { class: 'json-box' }, h('summary', null, 'Input'), h('pre', null, jsonText(j.input))));
    }
    outcome.replaceChildren(...parts);
  }

  // What waits to start: the job (for its concurrency key) and its tasks, by reason.
  renderWaiting() {
    const j = this.job;
    const parts = [];
    if (jobWaits(j)) {
      if (j.waitingFor) parts.push(capitalize(waitWords(j.waitingFor)));
      const tasks = tasksWaitingText(j.tasksWaiting);
      if (tasks) parts.push(parts.length ? tasks : capitalize(tasks));
    }
    const text = parts.join(' · ');
    const { waiting } = this.el;
    if (waiting.textContent !== text) waiting.textContent = text;
    waiting.hidden = !text;
    if (text) waiting.setAttribute('data-waiting-for', j.waitingFor || Object.keys(j.tasksWaiting || {}).join(' '));
    else waiting.removeAttribute('data-waiting-for');
  }

  // Waits are live only: no event says one began or ended. While the job says something waits,
  // its representation (and the selected node, when it has not ended) is read again every
  // WAIT_POLL_MS; an event (which may make a node ready that then waits, or end a wait) brings
  // the next read forward to WAIT_AFTER_EVENT_MS after it, but never closer than WAIT_POLL_MS to
  // the last one. One read at a time; none while the tab is hidden, nor once the job ended.
  watchWaits() {
    if (this.ended || this.ctx.closed || this.waitTimer) return;
    if (this.waitReading) {
      this.waitAgain = true;
      return;
    }
    const wait = Math.max(WAIT_AFTER_EVENT_MS, this.lastWaitRead + WAIT_POLL_MS - performance.now());
    this.waitTimer = setTimeout(() => this.readWaits(), wait);
  }

  async readWaits() {
    this.waitTimer = 0;
    if (this.ended || this.ctx.closed) return;
    if (document.hidden) {
      this.waitHidden = true;
      return;
    }
    this.waitReading = true;
    this.waitAgain = false;
    let goOn = true;
    try {
      const j = await api(jobPath(this.jobId), { signal: this.ctx.signal });
      this.mergeJob(j);
      const sel = this.details.selected;
      const node = sel && sel.kind === 'node' && this.model.nodes.get(sel.id);
      if (node && !TERMINAL_NODE_STATES.has(node.state)) this.details.refresh(false);
    } catch (e) {
      // A failed read is tried again by the next one (no toast every 2 s); a gone job is not.
      if (isAbort(e) || (e instanceof ApiError && (e.status === 404 || e.status === 401))) goOn = false;
    } finally {
      this.waitReading = false;
      this.lastWaitRead = performance.now();
      if (goOn && !this.ctx.closed && (this.waitAgain || jobWaits(this.job))) this.watchWaits();
    }
  }

  renderProgress() {
    const p = this.model.size ? this.model.progress() : this.job.progress;
    this.el.progressHost.replaceChildren(progressBar(p), h('span', { class: 'small muted' }, countsLine(p || {}) + ` — ${p ? p.total : 0} tasks`));
  }

  async cancelJob() {
    const ok = await confirmAction({
      title: 'Cancel this job?',
      message: [h('p', null, 'Job ', h('strong', null, this.job.name || this.job.id), ' will be cancelled: running actions stop at once and nodes that have not started never run.'),
        h('p', null, 'Cleanup continuations (on: cancellation / always) still run. This cannot be undone.')],
      ok: 'Cancel job',
    });
    if (!ok) return;
    try {
      const j = await api(jobPath(this.jobId, '/cancel'), { method: 'POST', signal: this.ctx.signal });
      this.mergeJob(j);
      toast('Cancellation requested.');
    } catch (e) {
      if (!isAbort(e)) toast(problemText(e), 'error');
    }
  }

  async redriveJob() {
    const ok = await confirmAction({
      title: 'Redrive this job?',
      message: [h('p', null, 'Job ', h('strong', null, this.job.name || this.job.id), ' runs again from where it stopped: failed, cancelled and skipped nodes run again; succeeded ones keep their results.')],
      ok: 'Redrive',
    });
    if (!ok) return;
    try {
      await api(jobPath(this.jobId, '/redrive'), { method: 'POST', signal: this.ctx.signal });
      // Its stream ended with the old terminal event: the page starts over on the job as it is now.
      location.reload();
    } catch (e) {
      if (!isAbort(e)) toast(problemText(e), 'error');
    }
  }

  async deleteJob() {
    const ok = await confirmAction({
      title: 'Delete this job?',
      message: [h('p', null, 'Job ', h('strong', null, this.job.name || this.job.id), ' will be removed with its tasks, events and deliveries.'),
        h('p', null, 'This cannot be undone.')],
      ok: 'Delete job',
    });
    if (!ok) return;
    try {
      await api(jobPath(this.jobId), { method: 'DELETE', signal: this.ctx.signal });
      toast('The job was deleted.');
      location.hash = '#/';
    } catch (e) {
      if (!isAbort(e)) toast(problemText(e), 'error');
    }
  }

  // MARK: - Events

  // Applies one new event of the job's stream (JobEvents has dropped repeats).
  apply(ev) {
    if (ev.type.startsWith('job.')) {
      const kind = ev.type.slice(4);
      const patch = {};
      if (kind === 'started') Object.assign(patch, { state: 'running', startedAt: this.job.startedAt || ev.time });
      else if (TERMINAL_JOB_STATES.has(kind)) Object.assign(patch, { state: kind, finishedAt: ev.time });
      if (kind === 'failed' && ev.data) patch.error = ev.data;
      if (kind === 'redriven') {
        // Its history goes on after a terminal event: running again (a lower rank than the end
        // mergeJob keeps), its end to come.
        this.job = Object.assign({}, this.job, { state: 'running', finishedAt: undefined, error: undefined, result: undefined });
        this.ended = false;
        this.model.redrivenSeq = ev.seq;
        this.renderHead();
        this.watchWaits();
      } else if (patch.state) {
        this.mergeJob(patch);
      }
      if (TERMINAL_JOB_STATES.has(kind) && !this.terminalAtLoad) {
        this.ended = true;
        // The final job (result, error) and every node's last word.
        api(jobPath(this.jobId), { signal: this.ctx.signal }).then((j) => this.mergeJob(j)).catch(() => {});
        this.scheduleRefetch();
        this.ctx.timeout(() => this.loadDeliveries(), 1500);
      }
    } else {
      const r = this.model.applyEvent(ev);
      if (r.unknown) this.scheduleRefetch();
      if (r.changed) this.dirty.add(r.changed);
    }
    if (!this.ended) this.watchWaits();
    this.scheduleFrame();
  }

  // MARK: - Graph

  layoutAndDraw(first) {
    this.layout = layoutGraph(this.model, this.expanded);
    this.graph.render(this.model, this.layout, { fit: first });
  }

  scheduleFrame() {
    if (!this.frame && !this.ctx.closed) this.frame = requestAnimationFrame(() => this.flush());
  }

  // Draws what changed since the last frame: the graph (a new layout, every node, or the nodes
  // marked dirty), the progress, the selected node's panel, new event rows, the timeline.
  flush() {
    this.frame = 0;
    if (this.ctx.closed) return;
    const { graph, model } = this;
    let selectedChanged = false;
    let changed = this.allDirty || this.dirty.size > 0;
    const sel = this.details.selected;
    if (this.relayout) {
      this.relayout = false;
      this.layoutAndDraw(false);
      selectedChanged = true;
      changed = true;
    } else if (this.allDirty) {
      for (const [id] of graph.groups) graph.setState(id, model.nodes.get(id));
      for (const id of this.layout.collapsed) graph.updateSummary(id, model.childCounts(id));
      selectedChanged = true;
    } else if (this.dirty.size) {
      const summaries = new Set();
      for (const id of this.dirty) {
        const node = model.nodes.get(id);
        if (!node) continue;
        if (!graph.setState(id, node) && node.parent && this.layout.collapsed.has(node.parent)) summaries.add(node.parent);
        if (sel && (sel.id === id || sel.id === node.parent)) selectedChanged = true;
      }
      for (const id of summaries) graph.updateSummary(id, model.childCounts(id));
    }
    this.allDirty = false;
    this.dirty.clear();
    if (changed) {
      this.renderProgress();
      this.timelineDirty = true;
    }
    if (selectedChanged && sel) this.details.refresh();
    this.events.appendRows();
    const now = performance.now();
    if (this.timelineDirty) {
      if (now - this.lastTimeline >= 500) {
        this.timelineDirty = false;
        this.lastTimeline = now;
        this.renderTimeline();
      } else if (!this.timelineTimer) {
        this.timelineTimer = setTimeout(() => {
          this.timelineTimer = 0;
          this.scheduleFrame();
        }, 520 - (now - this.lastTimeline));
      }
    }
  }

  // Re-reads the nodes (new ones, or the final word of all), at most every 250 ms + 1 ms per 20
  // nodes, one read at a time.
  scheduleRefetch() {
    if (this.refetchTimer) return; // the fetch to come will see the new nodes
    if (this.refetching) {
      this.refetchAgain = true;
      return;
    }
    const minGap = 250 + this.model.size / 20;
    const wait = Math.max(0, this.lastRefetch + minGap - performance.now());
    this.refetchTimer = setTimeout(() => this.refetchTasks(), wait);
  }

  async refetchTasks() {
    this.refetchTimer = 0;
    this.refetching = true;
    try {
      const t = await api(jobPath(this.jobId, '/tasks'), { signal: this.ctx.signal });
      if (this.model.setNodes(t.items)) this.relayout = true;
      else this.allDirty = true;
      this.scheduleFrame();
    } catch (e) {
      if (!isAbort(e) && !this.ctx.closed && !(e instanceof ApiError && e.status === 404)) toast(problemText(e), 'error');
    } finally {
      this.refetching = false;
      this.lastRefetch = performance.now();
      if (this.refetchAgain && !this.ctx.closed) {
        this.refetchAgain = false;
        this.scheduleRefetch();
      }
    }
  }

  // MARK: - Timeline

  renderTimeline() {
    const { timelineHost, timelineNote } = this.el;
    const data = timelineRows(this.model, this.layout ? this.layout.collapsed : null);
    let t0 = this.job.startedAt ? Date.parse(this.job.startedAt) : Date.parse(this.job.createdAt);
    let t1 = this.job.finishedAt ? Date.parse(this.job.finishedAt) : Date.now();
    for (const row of data.rows) {
      if (row.start) t0 = Math.min(t0, Date.parse(row.start));
      if (row.end) t1 = Math.max(t1, Date.parse(row.end));
    }
    if (!data.rows.length) {
      timelineHost.replaceChildren(h('p', { class: 'muted' }, 'No tasks.'));
      timelineNote.textContent = '';
      return;
    }
    const sel = this.details.selected;
    drawTimeline(timelineHost, data, t0, Math.max(t1, t0 + 1), sel && sel.id);
    timelineNote.textContent = (data.total > data.rows.length ? `The first ${data.rows.length} of ${data.total} rows. ` : '')
      + 'One row per task from its first start to its end (marks: retries); a collapsed map is one row.';
  }

  // MARK: - Deliveries

  async loadDeliveries() {
    const host = this.el.deliveriesHost;
    let page;
    try {
      page = await api(jobPath(this.jobId, '/deliveries'), { signal: this.ctx.signal });
    } catch (e) {
      if (!isAbort(e) && !this.ctx.closed) host.replaceChildren(h('p', { class: 'muted' }, problemText(e)));
      return;
    }
    const items = page.items || [];
    if (!items.length) {
      host.replaceChildren(h('p', { class: 'muted', testid: 'deliveries-empty' }, 'No webhook deliveries (the job has no webhook, or none has been planned yet).'));
      return;
    }
    host.replaceChildren(deliveriesTable(items));
    if (items.some((d) => d.state === 'pending')) this.ctx.timeout(() => this.loadDeliveries(), 5000);
  }
}

function capitalize(s) {
  return s ? s.charAt(0).toUpperCase() + s.slice(1) : s;
}

function deliveriesTable(items) {
  const tbody = h('tbody');
  for (const d of items) {
    const last = d.attempts && d.attempts.length ? d.attempts[d.attempts.length - 1] : null;
    tbody.appendChild(h('tr', { testid: 'delivery-row', 'data-state': d.state },
      h('td', null, d.eventType),
      h('td', { class: 'mono url' }, d.url),
      h('td', null, h('span', { class: 'badge', 'data-state': d.state === 'delivered' ? 'succeeded' : d.state === 'failed' ? 'failed' : 'pending' }, d.state)),
      h('td', { class: 'num' }, String((d.attempts || []).length)),
      h('td', null, last ? `${fmtTime(last.at)} — ${last.status ? 'HTTP ' + last.status : last.error || 'no answer'} in ${last.durationMs} ms` : '—')));
  }
  return h('div', { class: 'table-wrap' }, h('table', { class: 'deliveries', testid: 'deliveries-table' },
    h('thead', null, h('tr', null, ['Event', 'Endpoint', 'State', 'Attempts', 'Last attempt'].map((t) => h('th', null, t)))), tbody));
}

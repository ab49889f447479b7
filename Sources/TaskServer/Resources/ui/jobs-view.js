// jobs-view.js — #/ : the jobs list. The first page comes from GET /v1/jobs (state and labels
// filtered by the server), later changes from the server-wide event stream; the name filter
// applies to the loaded jobs only.

import { api, isAbort, problemText } from './api.js';
import { confirmAction, toast } from './dialogs.js';
import { badge, compactJSON, duration, fmtTime, h, labelChips, progressBar } from './dom.js';
import { SSEStream } from './sse.js';
import { JOB_STATES, settledCount, stateRank } from './states.js';

const PAGE_SIZE = 50;

function jobMatches(job, filters) {
  if (filters.state && job.state !== filters.state) return false;
  for (const label of filters.labels) {
    const i = label.indexOf(':');
    const k = label.slice(0, i);
    const v = label.slice(i + 1);
    if (!job.labels || job.labels[k] !== v) return false;
  }
  return true;
}

function newerFirst(a, b) {
  if (a.createdAt !== b.createdAt) return a.createdAt < b.createdAt ? 1 : -1;
  return a.id < b.id ? 1 : a.id > b.id ? -1 : 0;
}

// The filters of the view's URL (#/?state=…&label=a:b,c:d&name=…).
function readFilters(query) {
  const filters = {
    state: JOB_STATES.includes(query.get('state')) ? query.get('state') : '',
    label: query.get('label') || '',
    name: query.get('name') || '',
  };
  filters.labels = filters.label.split(',').map((s) => s.trim()).filter(Boolean);
  return filters;
}

// The filter form. State and labels are the server's filters: applying them opens the view
// anew (#/?state=…&label=…); the name filters the loaded rows in place (onNameInput()).
function filterForm(filters, ctx, onNameInput) {
  const stateSelect = h('select', { name: 'state', testid: 'filter-state' },
    h('option', { value: '' }, 'any state'),
    JOB_STATES.map((s) => h('option', { value: s, selected: s === filters.state }, s)));
  const labelInput = h('input', { name: 'label', value: filters.label, placeholder: 'team:data, env:prod', testid: 'filter-label', autocomplete: 'off' });
  const nameInput = h('input', { name: 'name', type: 'search', value: filters.name, placeholder: 'contains…', testid: 'filter-name', autocomplete: 'off' });
  const form = h('form', { class: 'filters', testid: 'jobs-filter' },
    h('label', null, 'State ', stateSelect),
    h('label', null, 'Labels ', labelInput),
    h('label', null, 'Name ', nameInput),
    h('button', { type: 'submit', class: 'primary' }, 'Apply'),
    h('p', { class: 'hint' }, 'State and labels are filtered by the server (labels as key:value, comma-separated, all must match); the name filters the jobs loaded on this page only.'));
  form.addEventListener('submit', (e) => {
    e.preventDefault();
    const q = new URLSearchParams();
    if (stateSelect.value) q.set('state', stateSelect.value);
    if (labelInput.value.trim()) q.set('label', labelInput.value.trim());
    if (nameInput.value) q.set('name', nameInput.value);
    const s = q.toString();
    const target = '#/' + (s ? '?' + s : '');
    if (location.hash === target) ctx.rerender();
    else location.hash = target;
  });
  stateSelect.addEventListener('change', () => form.requestSubmit());
  nameInput.addEventListener('input', () => {
    filters.name = nameInput.value;
    const q = new URLSearchParams(location.hash.replace(/^#\/?\??/, ''));
    if (filters.name) q.set('name', filters.name);
    else q.delete('name');
    const s = q.toString();
    history.replaceState(null, '', '#/' + (s ? '?' + s : ''));
    onNameInput();
  });
  return form;
}

// How many failed jobs with these labels the server lists, counted a page of 1,000 at a time up
// to `bound` (then `more` is true): what the confirmation of "redrive all failed" shows.
async function countFailed(labels, bound, signal) {
  let count = 0;
  let cursor = null;
  do {
    const q = [['state', 'failed'], ['limit', 1000]];
    for (const l of labels) q.push(['label', l]);
    if (cursor) q.push(['cursor', cursor]);
    const page = await api('/v1/jobs', { query: q, signal });
    count += page.items.length;
    cursor = page.nextCursor;
  } while (cursor && count < bound);
  return { count, more: Boolean(cursor) };
}

// POST /v1/jobs/redrive?state=failed&label=… page after page (each job judged alone by the
// server); → {redriven, left}.
async function redriveFailed(labels, signal) {
  let redriven = 0;
  let left = 0;
  let cursor = null;
  do {
    const q = [['state', 'failed'], ['limit', 1000]];
    for (const l of labels) q.push(['label', l]);
    if (cursor) q.push(['cursor', cursor]);
    const page = await api('/v1/jobs/redrive', { method: 'POST', query: q, signal });
    for (const item of page.items) {
      if (item.status === 202) redriven += 1;
      else left += 1;
    }
    cursor = page.nextCursor;
  } while (cursor);
  return { redriven, left };
}

// A row of the jobs table.
function jobRow(job) {
  const p = job.progress || { total: 0 };
  const done = settledCount(p);
  const tr = h('tr', { testid: 'job-row', 'data-job-id': job.id, 'data-state': job.state },
    h('td', { class: 'name' },
      h('a', { href: '#/jobs/' + encodeURIComponent(job.id), testid: 'job-link', class: job.name ? '' : 'muted' }, job.name !== undefined && job.name !== '' ? job.name : '(unnamed)'),
      h('div', { class: 'id mono' }, job.id,
        job.priority !== undefined && job.priority !== 5
          ? h('span', { class: 'prio', testid: 'job-row-priority', 'data-priority': job.priority, title: `priority ${job.priority} (default 5; higher starts first)` }, `p${job.priority}`)
          : null)),
    h('td', null, badge(job.state, 'job-row-state')),
    h('td', { class: 'progress' }, progressBar(p), h('span', { class: 'muted small' }, `${done}/${p.total || 0} tasks`)),
    h('td', null, labelChips(job.labels)),
    h('td', { class: 'nowrap' }, fmtTime(job.createdAt)),
    h('td', { class: 'nowrap' }, job.startedAt ? duration(job.startedAt, job.finishedAt)
      : job.state === 'pending' && job.runAt ? h('span', { class: 'muted', testid: 'job-row-run-at', title: 'delayed start' }, 'at ' + fmtTime(job.runAt)) : '—'));
  if (job.error) tr.title = `${job.error.code}: ${job.error.message}`;
  return tr;
}

export async function jobsView(root, query, ctx) {
  const filters = readFilters(query);
  const badLabel = filters.labels.find((l) => l.indexOf(':') < 1);
  document.title = 'Jobs · TaskServer';

  const form = filterForm(filters, ctx, () => scheduleRender());
  const live = h('span', { class: 'live', testid: 'live-indicator', 'data-live': 'connecting' }, 'connecting…');
  const counts = h('div', { class: 'counts', testid: 'state-counts' });
  const tbody = h('tbody', { testid: 'jobs-table' });
  const empty = h('p', { class: 'muted empty', testid: 'jobs-empty', hidden: true }, 'No jobs yet.');
  const more = h('button', { type: 'button', testid: 'load-more', hidden: true }, 'Load more');
  // Past LIVE_INSERT_CAP new jobs the list stops growing by itself (a busy server would flood the
  // page) and offers to reload instead; rows already shown keep updating.
  const LIVE_INSERT_CAP = 100;
  let liveAdded = 0;
  const waiting = new Set();
  const newJobs = h('button', { type: 'button', class: 'small primary', testid: 'new-jobs', hidden: true });
  newJobs.addEventListener('click', () => {
    loadFirstPage().catch((e) => {
      if (!isAbort(e) && !ctx.closed) toast(problemText(e), 'error');
    });
  });
  // "Redrive all failed": every failed job the label filter lists, after a confirmation that
  // shows how many the server counts (POST /v1/jobs/redrive, a page at a time).
  const redriveAll = h('button', { type: 'button', class: 'small', testid: 'redrive-all-failed', title: 'Run every failed job of this filter again from where it stopped' }, 'Redrive all failed…');
  redriveAll.addEventListener('click', async () => {
    redriveAll.disabled = true;
    try {
      const { count, more } = await countFailed(filters.labels, 10000, ctx.signal);
      if (count === 0) {
        toast('No failed job matches this filter.');
        return;
      }
      const shown = more ? `${count.toLocaleString()}+` : count.toLocaleString();
      const scope = filters.labels.length ? ` with the labels ${filters.labels.join(', ')}` : '';
      const ok = await confirmAction({
        title: 'Redrive all failed jobs',
        message: [h('span', { testid: 'redrive-all-count', 'data-count': more ? '' : String(count) }, `${shown} failed ${count === 1 ? 'job' : 'jobs'}${scope}`),
          ' will run again from where each stopped; what had succeeded does not run again.'],
        ok: `Redrive ${shown}`,
        danger: false,
      });
      if (!ok) return;
      const { redriven, left } = await redriveFailed(filters.labels, ctx.signal);
      toast(`${redriven.toLocaleString()} redriven${left ? `, ${left.toLocaleString()} left alone (no longer failed)` : ''}.`);
      await loadFirstPage();
    } catch (e) {
      if (!isAbort(e) && !ctx.closed) toast(problemText(e), 'error');
    } finally {
      redriveAll.disabled = false;
    }
  });
  const table = h('table', { class: 'jobs' },
    h('thead', null, h('tr', null, ['Name', 'State', 'Progress', 'Labels', 'Created', 'Duration'].map((t) => h('th', null, t)))),
    tbody);
  root.appendChild(h('section', { class: 'card' },
    h('div', { class: 'title-row' }, h('h1', null, 'Jobs'), live, newJobs, redriveAll),
    form, counts, h('div', { class: 'table-wrap' }, table), empty, more));

  if (badLabel) {
    empty.hidden = false;
    empty.textContent = `A label filter is written key:value — "${badLabel}" is not.`;
    return;
  }

  const jobs = new Map();
  const rows = new Map(); // id → {tr, key}
  let nextCursor = null;
  let loaded = false;
  const buffered = [];
  let frame = 0;

  function serverQuery(cursor) {
    const q = [['limit', PAGE_SIZE]];
    if (filters.state) q.push(['state', filters.state]);
    for (const l of filters.labels) q.push(['label', l]);
    if (cursor) q.push(['cursor', cursor]);
    return q;
  }

  function rowFor(job) {
    const key = compactJSON([job.state, job.name, job.progress, job.finishedAt, job.startedAt, job.runAt, job.labels, job.priority]);
    const cached = rows.get(job.id);
    if (cached && cached.key === key) return cached.tr;
    const tr = jobRow(job);
    if (cached) cached.tr.replaceWith(tr);
    rows.set(job.id, { tr, key });
    return tr;
  }

  function renderNow() {
    frame = 0;
    const list = Array.from(jobs.values()).sort(newerFirst);
    const needle = filters.name.toLowerCase();
    const c = Object.fromEntries(JOB_STATES.map((s) => [s, 0]));
    const trs = [];
    let shown = 0;
    for (const job of list) {
      c[job.state] = (c[job.state] || 0) + 1;
      const tr = rowFor(job);
      const visible = !needle || (job.name || '').toLowerCase().includes(needle);
      tr.hidden = !visible;
      if (visible) shown += 1;
      trs.push(tr);
    }
    for (const id of Array.from(rows.keys())) if (!jobs.has(id)) rows.delete(id);
    tbody.replaceChildren(...trs);
    counts.replaceChildren(
      h('span', { class: 'muted small' }, `${list.length} loaded${needle ? `, ${shown} match the name` : ''}:`),
      ...JOB_STATES.map((s) => h('a', {
        class: 'count' + (filters.state === s ? ' active' : ''), 'data-state': s, testid: 'count-' + s,
        href: '#/?state=' + s + (filters.label ? '&label=' + encodeURIComponent(filters.label) : ''),
        title: `Show only ${s} jobs`,
      }, h('span', { class: 'dot', 'data-state': s }), `${s} ${c[s]}`)));
    empty.hidden = shown > 0;
    if (!shown) empty.textContent = list.length ? 'No loaded job matches the name.' : 'No jobs match.';
    more.hidden = !nextCursor;
    newJobs.hidden = waiting.size === 0;
    newJobs.textContent = `${waiting.size} more new ${waiting.size === 1 ? 'job' : 'jobs'} — show`;
  }

  function scheduleRender() {
    if (!frame) frame = requestAnimationFrame(renderNow);
  }
  ctx.onClose(() => {
    if (frame) cancelAnimationFrame(frame);
  });

  function upsert(job) {
    const existing = jobs.get(job.id);
    if (existing && stateRank(job.state) < stateRank(existing.state)) return;
    if (!jobMatches(job, filters)) {
      if (existing) jobs.delete(job.id);
      scheduleRender();
      return;
    }
    if (!existing && nextCursor) {
      // Only jobs within the loaded window: older ones come with "load more".
      let oldest = null;
      for (const j of jobs.values()) if (!oldest || newerFirst(j, oldest) > 0) oldest = j;
      if (oldest && newerFirst(job, oldest) > 0) return;
    }
    if (!existing) {
      if (liveAdded >= LIVE_INSERT_CAP) {
        if (waiting.size < 100000) waiting.add(job.id);
        scheduleRender();
        return;
      }
      liveAdded += 1;
    }
    jobs.set(job.id, Object.assign({}, existing, job));
    scheduleRender();
  }

  function onServerEvent(msg) {
    if (msg.event === 'stream.reset') {
      loadFirstPage().catch((e) => {
        if (!isAbort(e) && !ctx.closed) toast(problemText(e), 'error');
      });
      return;
    }
    let d;
    try {
      d = JSON.parse(msg.data);
    } catch {
      return;
    }
    if (!d || !d.job) return;
    if (!loaded) buffered.push(d.job);
    else upsert(d.job);
  }

  async function loadFirstPage() {
    loaded = false;
    liveAdded = 0;
    waiting.clear();
    const page = await api('/v1/jobs', { query: serverQuery(null), signal: ctx.signal });
    jobs.clear();
    for (const job of page.items) jobs.set(job.id, job);
    nextCursor = page.nextCursor;
    loaded = true;
    for (const job of buffered.splice(0)) upsert(job);
    renderNow();
  }

  more.addEventListener('click', async () => {
    more.disabled = true;
    try {
      const page = await api('/v1/jobs', { query: serverQuery(nextCursor), signal: ctx.signal });
      for (const job of page.items) if (!jobs.has(job.id)) jobs.set(job.id, job);
      nextCursor = page.nextCursor;
      renderNow();
    } catch (e) {
      if (!isAbort(e)) toast(problemText(e), 'error');
    } finally {
      more.disabled = false;
    }
  });

  const setLive = (s) => {
    live.setAttribute('data-live', s);
    live.textContent = { live: 'live', reconnecting: 'reconnecting…', off: 'live updates unavailable', ended: 'stream ended' }[s] || s;
    live.title = s === 'live' ? 'Updates arrive from the server-wide event stream.' : '';
  };
  ctx.stream(new SSEStream('/v1/events', {
    onEvent: onServerEvent,
    onStatus: setLive,
    onFail: () => setLive('off'),
    onNotStream: () => setLive('off'),
  }));
  // Durations of running jobs tick.
  ctx.interval(() => {
    for (const job of jobs.values()) if (job.state === 'running') rows.delete(job.id);
    scheduleRender();
  }, 5000);
  await loadFirstPage();
}

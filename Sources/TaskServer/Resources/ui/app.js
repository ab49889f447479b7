// app.js — the TaskServer dashboard: hash routing, the views (jobs, a job, executors), a client
// of the public API, and a reader of server-sent events over fetch() (EventSource cannot send an
// Authorization header). Hand-written, no dependencies. Every string from the server goes into
// the page through textContent or setAttribute, never as HTML, and nothing here needs inline
// script or eval (the page is served with a strict Content-Security-Policy).

import {
  JobModel, GraphView, layoutGraph, timelineRows, drawTimeline, NODE_STATES, TERMINAL_NODE_STATES,
  countsLine, clip, formatOffset, EXPANDABLE_UP_TO, COLLAPSE_MAP_OVER, COLLAPSE_PARALLEL_OVER,
} from './graph.js';

const API_ROOT = new URL('../', document.baseURI); // the page is /ui/: the API is one level up
const KEY_STORAGE = 'taskserver.apiKey';
const JOB_STATES = ['pending', 'running', 'succeeded', 'failed', 'cancelled'];
const TERMINAL_JOB_STATES = new Set(['succeeded', 'failed', 'cancelled']);
const JOB_STATE_RANK = { pending: 0, running: 1, succeeded: 2, failed: 2, cancelled: 2 };
const EVENT_ROWS_SHOWN = 1000;
const PAGE_SIZE = 50;

// MARK: - DOM helpers

// h('a', {href, class, testid, text, onclick…}, children…) — builds an element; strings become text nodes.
function h(tag, props, ...children) {
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

function appendAll(e, children) {
  for (const c of children) {
    if (c === undefined || c === null || c === false) continue;
    if (Array.isArray(c)) appendAll(e, c);
    else if (c instanceof Node) e.appendChild(c);
    else e.appendChild(document.createTextNode(String(c)));
  }
}

function badge(state, testid) {
  return h('span', { class: 'badge', 'data-state': state, testid }, state);
}

function pad(n, w = 2) {
  return String(n).padStart(w, '0');
}

function fmtTime(iso) {
  if (!iso) return '—';
  const d = new Date(iso);
  if (Number.isNaN(d.getTime())) return String(iso);
  return `${d.getFullYear()}-${pad(d.getMonth() + 1)}-${pad(d.getDate())} ${pad(d.getHours())}:${pad(d.getMinutes())}:${pad(d.getSeconds())}`;
}

function fmtClock(iso) {
  const d = new Date(iso);
  if (Number.isNaN(d.getTime())) return String(iso);
  return `${pad(d.getHours())}:${pad(d.getMinutes())}:${pad(d.getSeconds())}.${pad(d.getMilliseconds(), 3)}`;
}

function duration(startIso, endIso) {
  if (!startIso) return '—';
  const end = endIso ? Date.parse(endIso) : Date.now();
  const ms = Math.max(0, end - Date.parse(startIso));
  return formatOffset(ms) + (endIso ? '' : ' so far');
}

function jsonText(value, max = 100000) {
  let s;
  try {
    s = JSON.stringify(value, null, 2);
  } catch {
    s = String(value);
  }
  if (s === undefined) s = 'undefined';
  return s.length > max ? s.slice(0, max) + `\n… (${s.length - max} more characters)` : s;
}

function compactJSON(value) {
  try {
    return JSON.stringify(value);
  } catch {
    return String(value);
  }
}

function sleep(ms) {
  return new Promise((resolve) => setTimeout(resolve, ms));
}

// MARK: - API client

class ApiError extends Error {
  constructor(status, problem) {
    super((problem && (problem.detail || problem.title)) || `HTTP ${status}`);
    this.status = status;
    this.problem = problem || {};
    this.code = this.problem.code || '';
  }
}

function apiKey() {
  try {
    return sessionStorage.getItem(KEY_STORAGE) || '';
  } catch {
    return '';
  }
}

function authHeaders(extra) {
  const headers = Object.assign({}, extra);
  const key = apiKey();
  if (key) headers.Authorization = 'Bearer ' + key;
  return headers;
}

// apiUrl('/v1/jobs', [['state', 'running'], ['label', 'a:b']]) — query pairs, repeats allowed.
function apiUrl(path, query) {
  const url = new URL(path.replace(/^\//, ''), API_ROOT);
  if (query) for (const [k, v] of query) if (v !== undefined && v !== null && v !== '') url.searchParams.append(k, String(v));
  return url;
}

async function readProblem(res) {
  const text = await res.text().catch(() => '');
  if (!text) return { title: res.statusText };
  try {
    return JSON.parse(text);
  } catch {
    return { detail: text.slice(0, 300) };
  }
}

async function api(path, { method = 'GET', query, body, signal } = {}) {
  const init = { method, headers: authHeaders({ Accept: 'application/json' }), signal, cache: 'no-store' };
  if (body !== undefined) {
    init.headers['Content-Type'] = 'application/json';
    init.body = JSON.stringify(body);
  }
  const res = await fetch(apiUrl(path, query), init);
  if (res.status === 204) return null;
  if (!res.ok) {
    const err = new ApiError(res.status, await readProblem(res));
    if (res.status === 401) auth.required(err);
    throw err;
  }
  const text = await res.text();
  return text ? JSON.parse(text) : null;
}

function jobPath(id, rest = '') {
  return '/v1/jobs/' + encodeURIComponent(id) + rest;
}

function taskPath(jobId, taskId, rest = '') {
  return jobPath(jobId, '/tasks/' + encodeURIComponent(taskId) + rest);
}

function isAbort(e) {
  return e && (e.name === 'AbortError' || e.name === 'TimeoutError');
}

// MARK: - Server-sent events over fetch()

// Returns feed(text): parses the text/event-stream format (lines ending in \n, \r\n or \r;
// `id`, `event`, `data` fields; comments) and calls onMessage({id, event, data}) per event.
export function sseParser(onMessage) {
  let buf = '';
  let skipLF = false;
  let data = [];
  let event = '';
  let lastId = null;
  function line(l) {
    if (l === '') {
      if (data.length) onMessage({ id: lastId, event: event || 'message', data: data.join('\n') });
      data = [];
      event = '';
      return;
    }
    if (l.charCodeAt(0) === 58) return; // ':' — a comment (keep-alive)
    const i = l.indexOf(':');
    const field = i < 0 ? l : l.slice(0, i);
    let value = i < 0 ? '' : l.slice(i + 1);
    if (value.charCodeAt(0) === 32) value = value.slice(1);
    if (field === 'data') data.push(value);
    else if (field === 'event') event = value;
    else if (field === 'id' && !value.includes('\0')) lastId = value;
  }
  return function feed(text) {
    buf += text;
    let pos = 0;
    const n = buf.length;
    while (pos < n) {
      if (skipLF) {
        skipLF = false;
        if (buf.charCodeAt(pos) === 10) {
          pos += 1;
          continue;
        }
      }
      const lf = buf.indexOf('\n', pos);
      const cr = buf.indexOf('\r', pos);
      if (lf < 0 && cr < 0) break;
      const end = lf < 0 ? cr : cr < 0 ? lf : Math.min(lf, cr);
      line(buf.slice(pos, end));
      if (end === cr) skipLF = true;
      pos = end + 1;
    }
    buf = buf.slice(pos);
  };
}

// A stream that reconnects with backoff and resumes with Last-Event-ID.
// handlers: query(lastId) → query pairs, onEvent(msg), onStatus(s) with s in
// live|reconnecting|ended|off, isDone() → true when an ended stream must not be reopened,
// onNotStream(res) for a server that answered without a stream, onFail(err).
class SSEStream {
  constructor(path, handlers) {
    this.path = path;
    this.handlers = handlers;
    this.lastId = handlers.lastId ?? null;
    this.closed = false;
    this.ctrl = null;
  }

  start() {
    this.loop().catch(() => {});
    return this;
  }

  status(s) {
    if (this.handlers.onStatus) this.handlers.onStatus(s);
  }

  async loop() {
    let backoff = 1000;
    while (!this.closed) {
      this.ctrl = new AbortController();
      let res;
      try {
        const headers = authHeaders({ Accept: 'text/event-stream' });
        if (this.lastId !== null) headers['Last-Event-ID'] = this.lastId;
        const query = this.handlers.query ? this.handlers.query(this.lastId) : [['stream', 'true']];
        res = await fetch(apiUrl(this.path, query), { headers, signal: this.ctrl.signal, cache: 'no-store' });
      } catch (e) {
        if (this.closed) return;
        this.status('reconnecting');
        await sleep(backoff);
        backoff = Math.min(backoff * 2, 15000);
        continue;
      }
      if (!res.ok) {
        const err = new ApiError(res.status, await readProblem(res));
        if (res.status === 401) {
          this.status('off');
          auth.required(err);
          return;
        }
        if (res.status === 400 || res.status === 404 || res.status === 405) {
          this.status('off');
          if (this.handlers.onFail) this.handlers.onFail(err);
          return;
        }
        this.status('reconnecting');
        const retryAfter = Number(res.headers.get('retry-after'));
        await sleep(retryAfter > 0 ? Math.min(retryAfter * 1000, 30000) : backoff);
        backoff = Math.min(backoff * 2, 15000);
        continue;
      }
      const type = res.headers.get('content-type') || '';
      if (!type.includes('text/event-stream')) {
        this.status('off');
        if (this.handlers.onNotStream) this.handlers.onNotStream(res);
        return;
      }
      this.status('live');
      backoff = 1000;
      const feed = sseParser((msg) => {
        if (msg.id !== null) this.lastId = msg.id;
        this.handlers.onEvent(msg);
      });
      try {
        const reader = res.body.getReader();
        const decoder = new TextDecoder();
        for (;;) {
          const { value, done } = await reader.read();
          if (done) break;
          feed(decoder.decode(value, { stream: true }));
        }
      } catch (e) {
        if (this.closed) return;
      }
      if (this.closed) return;
      if (this.handlers.isDone && this.handlers.isDone()) {
        this.status('ended');
        return;
      }
      this.status('reconnecting');
      await sleep(backoff);
      backoff = Math.min(backoff * 2, 15000);
    }
  }

  close() {
    this.closed = true;
    if (this.ctrl) this.ctrl.abort();
  }
}

// MARK: - Toasts, confirmations, API key

function toast(message, kind = 'info') {
  const box = document.getElementById('toasts');
  const t = h('div', { class: 'toast ' + kind, testid: 'toast', role: kind === 'error' ? 'alert' : 'status' }, message);
  box.appendChild(t);
  setTimeout(() => t.remove(), kind === 'error' ? 9000 : 5000);
}

function problemText(err) {
  if (err instanceof ApiError) {
    const p = err.problem;
    let s = `${p.title || 'Error'} (${err.status}${err.code ? ', ' + err.code : ''})`;
    if (p.detail) s += ': ' + p.detail;
    if (Array.isArray(p.errors) && p.errors.length) {
      s += ' — ' + p.errors.slice(0, 3).map((e) => `${e.pointer || ''} ${e.message || ''}`.trim()).join('; ');
    }
    return s;
  }
  return String((err && err.message) || err);
}

// confirmAction({title, message, ok, danger}) → Promise<boolean>, in the page's own <dialog>.
function confirmAction({ title, message, ok = 'Confirm', danger = true }) {
  const dialog = document.getElementById('confirm-dialog');
  document.getElementById('confirm-title').textContent = title;
  const body = document.getElementById('confirm-message');
  body.replaceChildren();
  appendAll(body, Array.isArray(message) ? message : [message]);
  const okButton = document.getElementById('confirm-ok');
  okButton.textContent = ok;
  okButton.className = danger ? 'danger' : 'primary';
  return new Promise((resolve) => {
    const cancelButton = document.getElementById('confirm-cancel');
    let answered = false;
    const finish = (answer) => {
      if (answered) return;
      answered = true;
      okButton.removeEventListener('click', onOk);
      cancelButton.removeEventListener('click', onCancel);
      dialog.removeEventListener('close', onClose);
      if (dialog.open) dialog.close();
      resolve(answer);
    };
    const onOk = () => finish(true);
    const onCancel = () => finish(false);
    const onClose = () => finish(false);
    okButton.addEventListener('click', onOk);
    cancelButton.addEventListener('click', onCancel);
    dialog.addEventListener('close', onClose);
    dialog.showModal();
    cancelButton.focus();
  });
}

const auth = {
  required(err) {
    const dialog = document.getElementById('key-dialog');
    const message = document.getElementById('key-message');
    message.textContent = err && err.code === 'auth.invalid'
      ? 'The server refused this API key. Enter a valid one.'
      : 'This server requires an API key for its API.';
    document.getElementById('key-error').textContent = '';
    if (!dialog.open) {
      dialog.showModal();
      document.getElementById('key-input').focus();
    }
    document.body.dataset.authRequired = 'true';
  },

  setup() {
    const form = document.getElementById('key-form');
    form.addEventListener('submit', (e) => {
      e.preventDefault();
      const input = document.getElementById('key-input');
      const key = input.value.trim();
      if (!key) {
        document.getElementById('key-error').textContent = 'Enter a key.';
        return;
      }
      try {
        sessionStorage.setItem(KEY_STORAGE, key);
      } catch {
        document.getElementById('key-error').textContent = 'This browser does not allow session storage.';
        return;
      }
      input.value = '';
      delete document.body.dataset.authRequired;
      document.getElementById('key-dialog').close();
      updateKeyButton();
      router.render();
    });
    document.getElementById('key-cancel').addEventListener('click', () => {
      document.getElementById('key-dialog').close();
    });
    document.getElementById('key-button').addEventListener('click', () => {
      if (apiKey()) {
        sessionStorage.removeItem(KEY_STORAGE);
        updateKeyButton();
        toast('The API key was forgotten (this tab no longer sends it).');
        router.render();
      } else {
        auth.required(null);
      }
    });
    updateKeyButton();
  },
};

function updateKeyButton() {
  const button = document.getElementById('key-button');
  const has = Boolean(apiKey());
  button.textContent = has ? 'Forget API key' : 'Set API key';
  button.setAttribute('data-testid', has ? 'forget-key' : 'set-key');
  button.title = has ? 'The key is kept in this tab only (sessionStorage).' : 'Only needed when the server runs with --api-key.';
}

// MARK: - Router

class ViewContext {
  constructor() {
    this.ctrl = new AbortController();
    this.cleanups = [];
    this.closed = false;
  }

  get signal() {
    return this.ctrl.signal;
  }

  interval(fn, ms) {
    const t = setInterval(fn, ms);
    this.cleanups.push(() => clearInterval(t));
  }

  timeout(fn, ms) {
    const cancel = () => clearTimeout(t);
    const t = setTimeout(() => {
      const i = this.cleanups.indexOf(cancel);
      if (i >= 0) this.cleanups.splice(i, 1);
      fn();
    }, ms);
    this.cleanups.push(cancel);
  }

  stream(s) {
    this.cleanups.push(() => s.close());
    return s.start();
  }

  onClose(fn) {
    this.cleanups.push(fn);
  }

  close() {
    this.closed = true;
    this.ctrl.abort();
    for (const fn of this.cleanups.splice(0)) {
      try {
        fn();
      } catch {
        // cleanup must not stop the next view
      }
    }
  }
}

const router = {
  ctx: null,
  routes: [
    [/^\/?$/, 'jobs', (root, m, q, ctx) => jobsView(root, q, ctx)],
    [/^\/jobs\/([^/]+)$/, 'jobs', (root, m, q, ctx) => jobView(root, decodeURIComponent(m[1]), ctx)],
    [/^\/executors$/, 'executors', (root, m, q, ctx) => executorsView(root, ctx)],
  ],

  render() {
    if (this.ctx) this.ctx.close();
    const ctx = new ViewContext();
    this.ctx = ctx;
    const raw = location.hash.replace(/^#/, '') || '/';
    const qi = raw.indexOf('?');
    const path = qi < 0 ? raw : raw.slice(0, qi);
    const query = new URLSearchParams(qi < 0 ? '' : raw.slice(qi + 1));
    const root = document.getElementById('app');
    root.replaceChildren();
    delete document.body.dataset.graphDrawnAt;
    delete document.body.dataset.graphNodes;
    delete document.body.dataset.graphJob;
    for (const [re, nav, view] of this.routes) {
      const m = re.exec(path);
      if (!m) continue;
      root.setAttribute('data-view', nav === 'jobs' && m.length > 1 ? 'job' : nav);
      for (const a of document.querySelectorAll('[data-nav]')) a.classList.toggle('active', a.getAttribute('data-nav') === nav);
      Promise.resolve(view(root, m, query, ctx)).catch((e) => {
        if (ctx.closed || isAbort(e)) return;
        showViewError(root, e);
      });
      return;
    }
    root.setAttribute('data-view', 'notfound');
    root.appendChild(h('section', { class: 'card' }, h('h1', null, 'Not found'), h('p', null, 'No page here. ', h('a', { href: '#/' }, 'Back to the jobs'), '.')));
  },
};

function showViewError(root, e) {
  const box = h('section', { class: 'card error-card', testid: 'view-error' });
  if (e instanceof ApiError && e.status === 401) {
    box.appendChild(h('h1', null, 'API key required'));
    box.appendChild(h('p', null, 'This server requires an API key. Enter it in the form; it is kept in this tab only.'));
    box.appendChild(h('button', { type: 'button', class: 'primary', testid: 'open-key-form', onclick: () => auth.required(e) }, 'Enter an API key'));
  } else if (e instanceof ApiError && e.status === 404) {
    box.appendChild(h('h1', null, 'Not found'));
    box.appendChild(h('p', null, problemText(e)));
    box.appendChild(h('p', null, h('a', { href: '#/' }, 'Back to the jobs')));
  } else {
    box.appendChild(h('h1', null, 'Something went wrong'));
    box.appendChild(h('p', null, problemText(e)));
  }
  root.replaceChildren(box);
}

// MARK: - Jobs view

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

function progressBar(progress, testid) {
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

function labelChips(labels) {
  const keys = labels ? Object.keys(labels) : [];
  if (!keys.length) return h('span', { class: 'muted' }, '—');
  return h('span', { class: 'chips' }, keys.map((k) => h('span', { class: 'chip' }, `${k}=${labels[k]}`)));
}

async function jobsView(root, query, ctx) {
  const filters = {
    state: JOB_STATES.includes(query.get('state')) ? query.get('state') : '',
    label: query.get('label') || '',
    name: query.get('name') || '',
  };
  filters.labels = filters.label.split(',').map((s) => s.trim()).filter(Boolean);
  const badLabel = filters.labels.find((l) => l.indexOf(':') < 1);
  document.title = 'Jobs · TaskServer';

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
    if (location.hash === target) router.render();
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
    scheduleRender();
  });

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
  const table = h('table', { class: 'jobs' },
    h('thead', null, h('tr', null, ['Name', 'State', 'Progress', 'Labels', 'Created', 'Duration'].map((t) => h('th', null, t)))),
    tbody);
  root.appendChild(h('section', { class: 'card' },
    h('div', { class: 'title-row' }, h('h1', null, 'Jobs'), live, newJobs),
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
    const key = compactJSON([job.state, job.name, job.progress, job.finishedAt, job.startedAt, job.labels]);
    const cached = rows.get(job.id);
    if (cached && cached.key === key) return cached.tr;
    const p = job.progress || { total: 0 };
    const done = (p.succeeded || 0) + (p.failed || 0) + (p.cancelled || 0) + (p.skipped || 0);
    const tr = h('tr', { testid: 'job-row', 'data-job-id': job.id, 'data-state': job.state },
      h('td', { class: 'name' },
        h('a', { href: '#/jobs/' + encodeURIComponent(job.id), testid: 'job-link', class: job.name ? '' : 'muted' }, job.name !== undefined && job.name !== '' ? job.name : '(unnamed)'),
        h('div', { class: 'id mono' }, job.id)),
      h('td', null, badge(job.state, 'job-row-state')),
      h('td', { class: 'progress' }, progressBar(p), h('span', { class: 'muted small' }, `${done}/${p.total || 0} tasks`)),
      h('td', null, labelChips(job.labels)),
      h('td', { class: 'nowrap' }, fmtTime(job.createdAt)),
      h('td', { class: 'nowrap' }, job.startedAt ? duration(job.startedAt, job.finishedAt) : '—'));
    if (job.error) tr.title = `${job.error.code}: ${job.error.message}`;
    if (cached) cached.tr.replaceWith(tr);
    rows.set(job.id, { tr, key });
    return tr;
  }

  function renderNow() {
    frame = 0;
    const list = Array.from(jobs.values()).sort(newerFirst);
    const needle = filters.name.toLowerCase();
    const c = { pending: 0, running: 0, succeeded: 0, failed: 0, cancelled: 0 };
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
    if (existing && (JOB_STATE_RANK[job.state] ?? 0) < (JOB_STATE_RANK[existing.state] ?? 0)) return;
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

// MARK: - Job view

async function jobView(root, jobId, ctx) {
  document.title = 'Job · TaskServer';
  const S = {
    job: null, model: new JobModel(), graph: null, layout: null, expanded: new Set(),
    selected: null, lastSeq: 0, events: [], pendingRows: [], ended: false,
    dirty: new Set(), allDirty: false, relayout: false, frame: 0, timelineDirty: true, lastTimeline: 0,
    refetchTimer: 0, refetching: false, refetchAgain: false, lastRefetch: 0, detailsKey: '', detailsFetching: false,
  };

  // Skeleton first: the page has its shape before the data arrives.
  const title = h('h1', { class: 'job-name', testid: 'job-name' }, '…');
  const stateBadge = h('span', { class: 'badge', testid: 'job-state' }, '…');
  const meta = h('dl', { class: 'meta' });
  const progressHost = h('div', { class: 'job-progress', testid: 'job-progress' });
  const cancelJobButton = h('button', { type: 'button', class: 'danger', testid: 'cancel-job', hidden: true }, 'Cancel job');
  const deleteJobButton = h('button', { type: 'button', class: 'danger', testid: 'delete-job', hidden: true }, 'Delete job');
  const redriveButton = h('button', { type: 'button', testid: 'redrive-job', disabled: true, title: 'Redrive comes with day-2 operations (SPEC §8).' }, 'Redrive');
  const streamState = h('span', { class: 'live', testid: 'job-live', 'data-live': 'connecting' }, 'connecting…');
  const outcome = h('div', { class: 'outcome', testid: 'job-outcome' });
  const graphHost = h('div', { class: 'graph-host', testid: 'graph', tabindex: '-1' }, h('p', { class: 'muted pad' }, 'Loading the graph…'));
  const details = h('aside', { class: 'details card', testid: 'node-details' }, h('p', { class: 'muted' }, 'Click a node to see its details.'));
  const timelineHost = h('div', { class: 'timeline-host', testid: 'timeline' });
  const timelineNote = h('p', { class: 'muted small' });
  const eventsBody = h('tbody', { testid: 'events-body' });
  const eventsNote = h('p', { class: 'muted small', testid: 'events-note' });
  const deliveriesHost = h('div', { testid: 'deliveries' }, h('p', { class: 'muted' }, 'Loading…'));
  const refreshDeliveriesButton = h('button', { type: 'button', class: 'small', testid: 'refresh-deliveries' }, 'Refresh');
  const zoomBar = h('div', { class: 'toolbar' },
    h('button', { type: 'button', class: 'small', testid: 'zoom-out', title: 'Zoom out', 'aria-label': 'Zoom out' }, '−'),
    h('button', { type: 'button', class: 'small', testid: 'zoom-in', title: 'Zoom in', 'aria-label': 'Zoom in' }, '+'),
    h('button', { type: 'button', class: 'small', testid: 'zoom-fit' }, 'Fit'),
    h('button', { type: 'button', class: 'small', testid: 'zoom-reset' }, '100%'),
    h('span', { class: 'legend' }, NODE_STATES.map((s) => h('span', { class: 'legend-item' }, h('span', { class: 'dot', 'data-state': s }), s))));

  root.appendChild(h('div', { class: 'job-page' },
    h('p', { class: 'crumbs' }, h('a', { href: '#/' }, '← Jobs')),
    h('section', { class: 'card job-head' },
      h('div', { class: 'title-row' }, title, stateBadge, streamState),
      meta, progressHost,
      h('div', { class: 'actions' }, cancelJobButton, deleteJobButton, redriveButton),
      outcome),
    h('div', { class: 'job-main' },
      h('section', { class: 'card graph-card' }, h('div', { class: 'card-head' }, h('h2', null, 'Graph'), zoomBar), graphHost),
      details),
    h('section', { class: 'card' }, h('div', { class: 'card-head' }, h('h2', null, 'Timeline')), timelineHost, timelineNote),
    h('section', { class: 'card' }, h('div', { class: 'card-head' }, h('h2', null, 'Events')),
      h('div', { class: 'table-wrap events-wrap' }, h('table', { class: 'events', testid: 'events-table' },
        h('thead', null, h('tr', null, ['#', 'Time', 'Type', 'Node', 'Data'].map((t) => h('th', null, t)))), eventsBody)),
      eventsNote),
    h('section', { class: 'card' }, h('div', { class: 'card-head' }, h('h2', null, 'Webhook deliveries'), refreshDeliveriesButton), deliveriesHost)));

  const graph = new GraphView(graphHost, (id, kind) => select(id, kind));
  S.graph = graph;
  zoomBar.querySelector('[data-testid=zoom-out]').addEventListener('click', () => graph.zoom(1 / 1.25));
  zoomBar.querySelector('[data-testid=zoom-in]').addEventListener('click', () => graph.zoom(1.25));
  zoomBar.querySelector('[data-testid=zoom-fit]').addEventListener('click', () => graph.fit());
  zoomBar.querySelector('[data-testid=zoom-reset]').addEventListener('click', () => graph.actualSize());
  timelineHost.addEventListener('click', (e) => {
    const row = e.target instanceof Element && e.target.closest('[data-task-id]');
    if (row) select(row.getAttribute('data-task-id'), S.layout && S.layout.collapsed.has(row.getAttribute('data-task-id')) ? 'summary' : 'node');
  });

  // The two reads the graph needs, at once.
  const [job, tasks] = await Promise.all([
    api(jobPath(jobId), { signal: ctx.signal }),
    api(jobPath(jobId, '/tasks'), { signal: ctx.signal }),
  ]);
  if (ctx.closed) return;
  S.job = job;
  S.model.setNodes(tasks.items);
  S.ended = TERMINAL_JOB_STATES.has(job.state);
  S.terminalAtLoad = S.ended;
  renderHead();
  layoutAndDraw(true);
  // A marker for tests and measurements: when the graph is in the page and a frame has passed.
  requestAnimationFrame(() => setTimeout(() => {
    if (ctx.closed) return;
    document.body.dataset.graphJob = jobId;
    document.body.dataset.graphNodes = String(S.model.size);
    document.body.dataset.graphDrawnAt = performance.now().toFixed(1);
    performance.mark('graph-drawn');
  }, 0));

  // Then the rest: events (history and live), deliveries, the timeline.
  ctx.timeout(() => {
    startEvents();
    loadDeliveries();
    S.timelineDirty = true;
    scheduleFrame();
  }, 0);
  ctx.interval(() => {
    if (!S.ended) {
      S.timelineDirty = true;
      scheduleFrame();
    }
  }, 1000);
  ctx.onClose(() => {
    if (S.frame) cancelAnimationFrame(S.frame);
    if (S.refetchTimer) clearTimeout(S.refetchTimer);
    if (S.timelineTimer) clearTimeout(S.timelineTimer);
  });

  cancelJobButton.addEventListener('click', async () => {
    const ok = await confirmAction({
      title: 'Cancel this job?',
      message: [h('p', null, 'Job ', h('strong', null, S.job.name || S.job.id), ' will be cancelled: running actions stop at once and nodes that have not started never run.'),
        h('p', null, 'Cleanup continuations (on: cancellation / always) still run. This cannot be undone.')],
      ok: 'Cancel job',
    });
    if (!ok) return;
    try {
      const j = await api(jobPath(jobId, '/cancel'), { method: 'POST', signal: ctx.signal });
      mergeJob(j);
      toast('Cancellation requested.');
    } catch (e) {
      if (!isAbort(e)) toast(problemText(e), 'error');
    }
  });
  deleteJobButton.addEventListener('click', async () => {
    const ok = await confirmAction({
      title: 'Delete this job?',
      message: [h('p', null, 'Job ', h('strong', null, S.job.name || S.job.id), ' will be removed with its tasks, events and deliveries.'),
        h('p', null, 'This cannot be undone.')],
      ok: 'Delete job',
    });
    if (!ok) return;
    try {
      await api(jobPath(jobId), { method: 'DELETE', signal: ctx.signal });
      toast('The job was deleted.');
      location.hash = '#/';
    } catch (e) {
      if (!isAbort(e)) toast(problemText(e), 'error');
    }
  });
  refreshDeliveriesButton.addEventListener('click', () => loadDeliveries());

  // MARK: head

  function mergeJob(j) {
    if (!j) return;
    if ((JOB_STATE_RANK[j.state] ?? 0) < (JOB_STATE_RANK[S.job.state] ?? 0)) return;
    S.job = Object.assign({}, S.job, j);
    if (TERMINAL_JOB_STATES.has(S.job.state)) S.ended = true;
    renderHead();
  }

  function renderHead() {
    const j = S.job;
    const name = j.name !== undefined && j.name !== '' ? j.name : '(unnamed job)';
    title.textContent = name;
    title.classList.toggle('muted', !j.name);
    document.title = clip(name, 60) + ' · TaskServer';
    stateBadge.textContent = j.state;
    stateBadge.setAttribute('data-state', j.state);
    meta.replaceChildren(
      h('dt', null, 'Id'), h('dd', { class: 'mono' }, j.id),
      h('dt', null, 'Created'), h('dd', null, fmtTime(j.createdAt)),
      h('dt', null, 'Started'), h('dd', null, fmtTime(j.startedAt)),
      h('dt', null, 'Finished'), h('dd', null, fmtTime(j.finishedAt)),
      h('dt', null, 'Duration'), h('dd', { testid: 'job-duration' }, duration(j.startedAt, j.finishedAt)),
      h('dt', null, 'Labels'), h('dd', null, labelChips(j.labels)));
    renderProgress();
    const terminal = TERMINAL_JOB_STATES.has(j.state);
    cancelJobButton.hidden = terminal;
    deleteJobButton.hidden = !terminal;
    const parts = [];
    if (j.error) {
      parts.push(h('div', { class: 'error-box', testid: 'job-error' },
        h('strong', null, j.error.code), ': ', j.error.message || '',
        j.error.taskId ? h('span', null, ' (node ', nodeLink(j.error.taskId), ')') : null,
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

  function renderProgress() {
    const p = S.model.size ? S.model.progress() : S.job.progress;
    progressHost.replaceChildren(progressBar(p), h('span', { class: 'small muted' }, countsLine(p || {}) + ` — ${p ? p.total : 0} tasks`));
  }

  function nodeLink(id) {
    return h('button', { type: 'button', class: 'link mono', 'data-goto': id, onclick: () => select(id, 'node') }, id);
  }

  // MARK: graph

  function layoutAndDraw(first) {
    S.layout = layoutGraph(S.model, S.expanded);
    graph.render(S.model, S.layout, { fit: first });
  }

  function scheduleFrame() {
    if (!S.frame && !ctx.closed) S.frame = requestAnimationFrame(flush);
  }

  function flush() {
    S.frame = 0;
    if (ctx.closed) return;
    let selectedChanged = false;
    let changed = S.allDirty || S.dirty.size > 0;
    const sel = S.selected;
    if (S.relayout) {
      S.relayout = false;
      layoutAndDraw(false);
      selectedChanged = true;
      changed = true;
    } else if (S.allDirty) {
      for (const [id] of graph.groups) graph.setState(id, S.model.nodes.get(id));
      for (const id of S.layout.collapsed) graph.updateSummary(id, S.model.childCounts(id));
      selectedChanged = true;
    } else if (S.dirty.size) {
      const summaries = new Set();
      for (const id of S.dirty) {
        const node = S.model.nodes.get(id);
        if (!node) continue;
        if (!graph.setState(id, node) && node.parent && S.layout.collapsed.has(node.parent)) summaries.add(node.parent);
        if (sel && (sel.id === id || sel.id === node.parent)) selectedChanged = true;
      }
      for (const id of summaries) graph.updateSummary(id, S.model.childCounts(id));
    }
    S.allDirty = false;
    S.dirty.clear();
    if (changed) {
      renderProgress();
      S.timelineDirty = true;
    }
    if (selectedChanged && sel) refreshDetails();
    appendEventRows();
    const now = performance.now();
    if (S.timelineDirty) {
      if (now - S.lastTimeline >= 500) {
        S.timelineDirty = false;
        S.lastTimeline = now;
        renderTimeline();
      } else if (!S.timelineTimer) {
        S.timelineTimer = setTimeout(() => {
          S.timelineTimer = 0;
          scheduleFrame();
        }, 520 - (now - S.lastTimeline));
      }
    }
  }

  function scheduleRefetch() {
    if (S.refetchTimer) return; // the fetch to come will see the new nodes
    if (S.refetching) {
      S.refetchAgain = true;
      return;
    }
    const minGap = 250 + S.model.size / 20;
    const wait = Math.max(0, S.lastRefetch + minGap - performance.now());
    S.refetchTimer = setTimeout(refetchTasks, wait);
  }

  async function refetchTasks() {
    S.refetchTimer = 0;
    S.refetching = true;
    try {
      const t = await api(jobPath(jobId, '/tasks'), { signal: ctx.signal });
      if (S.model.setNodes(t.items)) S.relayout = true;
      else S.allDirty = true;
      scheduleFrame();
    } catch (e) {
      if (!isAbort(e) && !ctx.closed && !(e instanceof ApiError && e.status === 404)) toast(problemText(e), 'error');
    } finally {
      S.refetching = false;
      S.lastRefetch = performance.now();
      if (S.refetchAgain && !ctx.closed) {
        S.refetchAgain = false;
        scheduleRefetch();
      }
    }
  }

  // MARK: events

  function onJobEvent(ev) {
    if (typeof ev.seq !== 'number' || ev.seq <= S.lastSeq) return;
    S.lastSeq = ev.seq;
    S.events.push(ev);
    S.pendingRows.push(ev);
    if (ev.type.startsWith('job.')) {
      const kind = ev.type.slice(4);
      const patch = {};
      if (kind === 'started') Object.assign(patch, { state: 'running', startedAt: S.job.startedAt || ev.time });
      else if (TERMINAL_JOB_STATES.has(kind)) Object.assign(patch, { state: kind, finishedAt: ev.time });
      if (kind === 'failed' && ev.data) patch.error = ev.data;
      if (patch.state) mergeJob(patch);
      if (TERMINAL_JOB_STATES.has(kind) && !S.terminalAtLoad) {
        S.ended = true;
        // The final job (result, error) and every node's last word.
        api(jobPath(jobId), { signal: ctx.signal }).then(mergeJob).catch(() => {});
        scheduleRefetch();
        ctx.timeout(loadDeliveries, 1500);
      }
    } else {
      const r = S.model.applyEvent(ev);
      if (r.unknown) scheduleRefetch();
      if (r.changed) S.dirty.add(r.changed);
    }
    scheduleFrame();
  }

  function startEvents() {
    const setLive = (s) => {
      streamState.setAttribute('data-live', s);
      streamState.textContent = { live: 'live', reconnecting: 'reconnecting…', off: 'not live', ended: 'finished' }[s] || s;
    };
    ctx.stream(new SSEStream(jobPath(jobId, '/events'), {
      query: () => [['stream', 'true'], ['after', S.lastSeq]],
      onEvent: (msg) => {
        try {
          onJobEvent(JSON.parse(msg.data));
        } catch {
          // a malformed event is skipped; the next one carries on
        }
      },
      onStatus: setLive,
      isDone: () => S.ended && S.events.length > 0 && TERMINAL_JOB_STATES.has(S.job.state),
      onFail: (e) => {
        if (e.status === 404) streamState.textContent = 'job gone';
      },
      // A server without streams answers with the JSON list: follow it by long-polling.
      onNotStream: (res) => {
        res.json().then((page) => {
          for (const ev of page.items || []) onJobEvent(ev);
          pollEvents(setLive);
        }).catch(() => setLive('off'));
      },
    }));
  }

  async function pollEvents(setLive) {
    setLive('live');
    while (!ctx.closed) {
      if (S.ended && TERMINAL_JOB_STATES.has(S.job.state)) {
        setLive('ended');
        return;
      }
      try {
        const page = await api(jobPath(jobId, '/events'), { query: [['after', S.lastSeq], ['waitMs', 20000], ['limit', 10000]], signal: ctx.signal });
        for (const ev of page.items) onJobEvent(ev);
      } catch (e) {
        if (ctx.closed || isAbort(e)) return;
        setLive('reconnecting');
        await sleep(2000);
      }
    }
  }

  function appendEventRows() {
    if (!S.pendingRows.length) return;
    const wrap = eventsBody.closest('.events-wrap');
    const follow = !wrap || wrap.scrollTop + wrap.clientHeight >= wrap.scrollHeight - 40;
    const batch = S.pendingRows.splice(0);
    const fresh = batch.length > EVENT_ROWS_SHOWN ? batch.slice(batch.length - EVENT_ROWS_SHOWN) : batch;
    const frag = document.createDocumentFragment();
    for (const ev of fresh) {
      let data = '';
      if (ev.data !== undefined) data = compactJSON(ev.data);
      const dataCell = h('td', { class: 'data mono' }, clip(data, 160));
      if (data.length > 160) dataCell.title = clip(data, 4000);
      frag.appendChild(h('tr', { testid: 'event-row', 'data-seq': ev.seq, 'data-type': ev.type },
        h('td', { class: 'num' }, String(ev.seq)),
        h('td', { class: 'nowrap mono' }, fmtClock(ev.time)),
        h('td', null, h('span', { class: 'etype', 'data-kind': ev.type.split('.')[1] }, ev.type)),
        h('td', null, ev.taskId ? nodeLink(ev.taskId) : ''),
        dataCell));
    }
    eventsBody.appendChild(frag);
    let extra = eventsBody.childElementCount - EVENT_ROWS_SHOWN;
    while (extra-- > 0) eventsBody.firstElementChild.remove();
    const n = S.events.length;
    eventsNote.textContent = n > EVENT_ROWS_SHOWN ? `Showing the last ${EVENT_ROWS_SHOWN} of ${n} events.` : `${n} events.`;
    if (follow && wrap) wrap.scrollTop = wrap.scrollHeight;
  }

  // MARK: timeline

  function renderTimeline() {
    const data = timelineRows(S.model, S.layout ? S.layout.collapsed : null);
    let t0 = S.job.startedAt ? Date.parse(S.job.startedAt) : Date.parse(S.job.createdAt);
    let t1 = S.job.finishedAt ? Date.parse(S.job.finishedAt) : Date.now();
    for (const row of data.rows) {
      if (row.start) t0 = Math.min(t0, Date.parse(row.start));
      if (row.end) t1 = Math.max(t1, Date.parse(row.end));
    }
    if (!data.rows.length) {
      timelineHost.replaceChildren(h('p', { class: 'muted' }, 'No tasks.'));
      timelineNote.textContent = '';
      return;
    }
    drawTimeline(timelineHost, data, t0, Math.max(t1, t0 + 1), S.selected && S.selected.id);
    timelineNote.textContent = (data.total > data.rows.length ? `The first ${data.rows.length} of ${data.total} rows. ` : '')
      + 'One row per task from its first start to its end (marks: retries); a collapsed map is one row.';
  }

  // MARK: details

  function select(id, kind) {
    if (!S.model.nodes.has(id)) return;
    S.selected = { id, kind };
    S.detailsKey = '';
    // A node inside a collapsed map is not drawn: its summary is highlighted instead.
    let shown = id;
    while (shown && !graph.isDrawn(shown) && !(S.layout && S.layout.collapsed.has(shown))) {
      const n = S.model.nodes.get(shown);
      shown = n && n.parent;
    }
    graph.markSelected(shown || null);
    if (kind === 'node' && graph.isDrawn(id)) graph.scrollTo(id);
    S.timelineDirty = true;
    scheduleFrame();
    refreshDetails(true);
  }

  async function refreshDetails(immediate) {
    const sel = S.selected;
    if (!sel) return;
    if (sel.kind === 'summary') {
      renderSummaryDetails(sel.id);
      return;
    }
    const cached = S.model.nodes.get(sel.id);
    if (immediate && cached) renderNodeDetails(cached);
    if (S.detailsFetching) {
      S.detailsAgain = true;
      return;
    }
    S.detailsFetching = true;
    try {
      const node = await api(taskPath(jobId, sel.id), { signal: ctx.signal });
      if (S.selected && S.selected.id === node.id) {
        const mine = S.model.nodes.get(node.id);
        if (mine && (NODE_RANK(node.state) >= NODE_RANK(mine.state))) Object.assign(mine, node);
        renderNodeDetails(mine || node);
      }
    } catch (e) {
      if (!isAbort(e) && !ctx.closed && !(e instanceof ApiError && e.status === 404)) toast(problemText(e), 'error');
    } finally {
      S.detailsFetching = false;
      if (S.detailsAgain && !ctx.closed) {
        S.detailsAgain = false;
        refreshDetails(false);
      }
    }
  }

  function renderNodeDetails(node) {
    const key = compactJSON([node.id, node.state, node.attempts, node.result !== undefined, Boolean(node.error), node.workerId, node.progress, node.finishedAt, S.expanded.has(node.id)]);
    if (key === S.detailsKey) return;
    S.detailsKey = key;
    const terminal = TERMINAL_NODE_STATES.has(node.state);
    const rows = [
      ['Type', node.type], ['Action', node.action], ['Executor', node.executor],
      ['Attempts', node.type === 'task' ? String(node.attempts ?? 0) : undefined],
      ['Started', node.startedAt ? fmtTime(node.startedAt) : '—'], ['Finished', node.finishedAt ? fmtTime(node.finishedAt) : '—'],
      ['Duration', node.startedAt ? duration(node.startedAt, node.finishedAt) : '—'],
      ['Worker', node.workerId],
    ];
    const dl = h('dl', { class: 'meta' });
    for (const [k, v] of rows) if (v !== undefined && v !== null) dl.append(h('dt', null, k), h('dd', { class: k === 'Worker' ? 'mono' : '' }, v));
    if (node.parent) dl.append(h('dt', null, 'Parent'), h('dd', null, nodeLink(node.parent)));
    const parts = [
      h('div', { class: 'details-head' }, h('h2', { class: 'mono', testid: 'details-title' }, node.id), badge(node.state, 'details-state')),
      dl,
    ];
    if (node.progress !== undefined) parts.push(h('h3', null, 'Progress'), h('pre', { testid: 'details-progress' }, jsonText(node.progress, 20000)));
    if (node.result !== undefined) parts.push(h('h3', null, 'Result'), h('pre', { testid: 'details-result' }, jsonText(node.result)));
    if (node.error) {
      parts.push(h('h3', null, 'Error'), h('div', { class: 'error-box', testid: 'details-error' },
        h('strong', null, node.error.code), ': ', node.error.message || '',
        node.error.details !== undefined ? h('pre', null, jsonText(node.error.details, 20000)) : null));
    }
    if (node.type === 'task') parts.push(h('p', { class: 'muted small' }, 'A task\'s input is not recorded; it is its parent\'s input or the previous step\'s result (see the job input and the results above it).'));
    const kids = S.model.kids(node.id);
    if (kids.length) {
      if ((node.type === 'map' || node.type === 'parallel') && S.layout) {
        const collapsed = S.layout.collapsed.has(node.id);
        if (collapsed && kids.length <= EXPANDABLE_UP_TO) {
          parts.push(h('button', { type: 'button', class: 'small', testid: 'expand-node', onclick: () => toggleExpanded(node.id, true) }, `Draw all ${kids.length}`));
        } else if (S.expanded.has(node.id)) {
          parts.push(h('button', { type: 'button', class: 'small', testid: 'collapse-node', onclick: () => toggleExpanded(node.id, false) }, 'Collapse into a summary'));
        }
      }
      parts.push(h('h3', null, `Children (${kids.length})`), childList(kids, ''));
    }
    const actions = h('div', { class: 'actions' });
    if (!terminal) {
      actions.appendChild(h('button', { type: 'button', class: 'danger', testid: 'cancel-task', onclick: () => cancelTask(node) }, 'Cancel node'));
    }
    parts.push(actions);
    if (node.action === 'await') {
      if (node.state === 'running') parts.push(awaitForm(node));
      else if (node.state === 'pending') parts.push(h('p', { class: 'muted small' }, 'This await task has not started: it can be completed once it runs.'));
    }
    details.replaceChildren(...parts);
  }

  function childList(ids, stateFilter) {
    const list = h('ul', { class: 'child-list', testid: 'child-list' });
    let shown = 0;
    let matching = 0;
    for (const id of ids) {
      const n = S.model.nodes.get(id);
      if (stateFilter && n.state !== stateFilter) continue;
      matching += 1;
      if (shown >= 100) continue;
      shown += 1;
      list.appendChild(h('li', null, h('span', { class: 'dot', 'data-state': n.state, title: n.state }), nodeLink(id)));
    }
    if (matching > shown) list.appendChild(h('li', { class: 'muted small' }, `… and ${matching - shown} more`));
    if (!matching) list.appendChild(h('li', { class: 'muted small' }, 'none'));
    return list;
  }

  function renderSummaryDetails(id) {
    const node = S.model.nodes.get(id);
    const kids = S.model.kids(id);
    const counts = S.model.childCounts(id);
    const key = compactJSON(['summary', id, counts, kids.length, S.summaryFilter || '']);
    if (key === S.detailsKey) return;
    S.detailsKey = key;
    const noun = node.type === 'map' ? 'instances' : 'branches';
    const filter = h('select', { testid: 'summary-filter' }, h('option', { value: '' }, 'all states'),
      NODE_STATES.map((s) => h('option', { value: s, selected: S.summaryFilter === s }, `${s} (${counts[s] || 0})`)));
    const listHost = h('div', null, childList(kids, S.summaryFilter || ''));
    filter.addEventListener('change', () => {
      S.summaryFilter = filter.value;
      S.detailsKey = '';
      renderSummaryDetails(id);
    });
    const parts = [
      h('div', { class: 'details-head' }, h('h2', { class: 'mono', testid: 'details-title' }, `${id}: ${kids.length} ${noun}`), badge(node.state, 'details-state')),
      h('p', { class: 'small' }, countsLine(counts)),
      progressBar(Object.assign({ total: kids.length }, counts)),
      h('p', { class: 'muted small' }, `Drawn as one box because there are more than ${node.type === 'map' ? COLLAPSE_MAP_OVER : COLLAPSE_PARALLEL_OVER} ${noun}. Pick one to see its details:`),
      h('label', { class: 'small' }, 'Show ', filter), listHost,
      h('div', { class: 'actions' },
        h('button', { type: 'button', class: 'small', onclick: () => select(id, 'node') }, `The ${node.type} node itself`),
        kids.length <= EXPANDABLE_UP_TO ? h('button', { type: 'button', class: 'small', testid: 'expand-node', onclick: () => toggleExpanded(id, true) }, `Draw all ${kids.length}`) : null),
    ];
    details.replaceChildren(...parts);
  }

  function toggleExpanded(id, on) {
    if (on) S.expanded.add(id);
    else S.expanded.delete(id);
    S.relayout = true;
    S.selected = { id, kind: 'node' };
    S.detailsKey = '';
    scheduleFrame();
  }

  async function cancelTask(node) {
    const ok = await confirmAction({
      title: 'Cancel this node?',
      message: [h('p', null, 'Node ', h('strong', { class: 'mono' }, node.id), ' and everything under it will be cancelled.'),
        h('p', null, 'The cancellation then follows the graph\'s rules (a series ends cancelled, an "any" parallel carries on…).')],
      ok: 'Cancel node',
    });
    if (!ok) return;
    try {
      await api(taskPath(jobId, node.id, '/cancel'), { method: 'POST', signal: ctx.signal });
      toast('Cancellation of the node requested.');
      S.detailsKey = '';
      refreshDetails(false);
    } catch (e) {
      if (!isAbort(e)) toast(problemText(e), 'error');
    }
  }

  function awaitForm(node) {
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
        const done = await api(taskPath(jobId, node.id, '/complete'), { method: 'POST', body, signal: ctx.signal });
        toast(`Task ${done.id} ${done.state}.`);
        const mine = S.model.nodes.get(done.id);
        if (mine) {
          Object.assign(mine, done);
          S.dirty.add(done.id);
        }
        S.detailsKey = '';
        renderNodeDetails(mine || done);
        scheduleFrame();
      } catch (err) {
        if (isAbort(err)) return;
        problem.textContent = problemText(err);
        submit.disabled = false;
      }
    });
    return form;
  }

  // MARK: deliveries

  async function loadDeliveries() {
    let page;
    try {
      page = await api(jobPath(jobId, '/deliveries'), { signal: ctx.signal });
    } catch (e) {
      if (!isAbort(e) && !ctx.closed) deliveriesHost.replaceChildren(h('p', { class: 'muted' }, problemText(e)));
      return;
    }
    const items = page.items || [];
    if (!items.length) {
      deliveriesHost.replaceChildren(h('p', { class: 'muted', testid: 'deliveries-empty' }, 'No webhook deliveries (the job has no webhook, or none has been planned yet).'));
      return;
    }
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
    deliveriesHost.replaceChildren(h('div', { class: 'table-wrap' }, h('table', { class: 'deliveries', testid: 'deliveries-table' },
      h('thead', null, h('tr', null, ['Event', 'Endpoint', 'State', 'Attempts', 'Last attempt'].map((t) => h('th', null, t)))), tbody)));
    if (items.some((d) => d.state === 'pending')) ctx.timeout(loadDeliveries, 5000);
  }
}

const NODE_RANK_MAP = { pending: 0, running: 1, succeeded: 2, failed: 2, cancelled: 2, skipped: 2 };
function NODE_RANK(s) {
  return NODE_RANK_MAP[s] ?? 0;
}

// MARK: - Executors view

async function executorsView(root, ctx) {
  document.title = 'Executors · TaskServer';
  const body = h('div', { testid: 'executors' }, h('p', { class: 'muted' }, 'Loading…'));
  const stamp = h('span', { class: 'muted small' });
  root.appendChild(h('section', { class: 'card' },
    h('div', { class: 'title-row' }, h('h1', null, 'Executors'), stamp),
    h('p', { class: 'hint' }, 'In-process pools run built-in actions with a fixed number of slots; external pools hand tasks to your workers over HTTP. Refreshed every 2 seconds.'),
    body));

  async function load() {
    const list = await api('/v1/executors', { signal: ctx.signal });
    const items = list.items || [];
    const workers = new Map();
    await Promise.all(items.filter((x) => x.kind === 'external').map(async (x) => {
      try {
        const w = await api('/v1/executors/' + encodeURIComponent(x.name) + '/workers', { signal: ctx.signal });
        workers.set(x.name, w.items || []);
      } catch (e) {
        if (isAbort(e)) throw e;
        workers.set(x.name, null);
      }
    }));
    if (ctx.closed) return;
    const tbody = h('tbody');
    for (const x of items) {
      const external = x.kind === 'external';
      tbody.appendChild(h('tr', { testid: 'executor-row', 'data-name': x.name, 'data-kind': x.kind },
        h('td', { class: 'mono' }, x.name),
        h('td', null, x.kind || 'pool'),
        h('td', { class: 'num' }, external ? '—' : String(x.size)),
        h('td', { class: 'num' }, external ? '—' : String(x.running)),
        h('td', { class: 'num' }, String(x.queued)),
        h('td', { class: 'num' }, external ? '—' : String(x.completed)),
        h('td', { class: 'num' }, external ? String(x.leased) : '—'),
        h('td', { class: 'num' }, external ? String(x.workers) : '—')));
      if (external) {
        const ws = workers.get(x.name);
        let inner;
        if (ws === null) inner = h('p', { class: 'muted small' }, 'Could not read the workers.');
        else if (!ws.length) inner = h('p', { class: 'muted small' }, 'No worker seen in the last 10 minutes.');
        else {
          inner = h('table', { class: 'workers', testid: 'workers-table' },
            h('thead', null, h('tr', null, ['Worker', 'Last seen', 'Leases'].map((t) => h('th', null, t)))),
            h('tbody', null, ws.map((w) => h('tr', { testid: 'worker-row' },
              h('td', { class: 'mono' }, w.workerId), h('td', null, fmtTime(w.lastSeenAt)), h('td', { class: 'num' }, String(w.leases))))));
        }
        tbody.appendChild(h('tr', { class: 'sub' }, h('td', { colspan: '8' }, h('div', { class: 'workers-box' }, h('strong', { class: 'small' }, `Workers of ${x.name}`), inner))));
      }
    }
    body.replaceChildren(h('div', { class: 'table-wrap' }, h('table', { class: 'executors', testid: 'executors-table' },
      h('thead', null, h('tr', null, ['Name', 'Kind', 'Size', 'Running', 'Queued', 'Completed', 'Leased', 'Workers'].map((t) => h('th', null, t)))),
      tbody)));
    stamp.textContent = 'updated ' + fmtClock(new Date().toISOString());
  }

  await load();
  ctx.interval(() => {
    load().catch((e) => {
      if (!isAbort(e) && !ctx.closed) stamp.textContent = problemText(e);
    });
  }, 2000);
}

// MARK: - Start

auth.setup();
window.addEventListener('hashchange', () => router.render());
router.render();

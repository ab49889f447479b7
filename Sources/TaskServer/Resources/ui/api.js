// api.js — the dashboard's client of the public API: URLs, the API key (kept in sessionStorage,
// sent as an Authorization header, never in a URL), JSON requests and RFC 9457 problems. A 401
// calls the handler set with onAuthRequired (the page's key form).

const API_ROOT = new URL('../', document.baseURI); // the page is /ui/: the API is one level up
const KEY_STORAGE = 'taskserver.apiKey';

export class ApiError extends Error {
  constructor(status, problem) {
    super((problem && (problem.detail || problem.title)) || `HTTP ${status}`);
    this.status = status;
    this.problem = problem || {};
    this.code = this.problem.code || '';
  }
}

// MARK: - The API key

let authRequiredHandler = () => {};

// fn(err) is called when the server answers 401 (err: the ApiError, or null when the user asks).
export function onAuthRequired(fn) {
  authRequiredHandler = fn;
}

export function authRequired(err) {
  authRequiredHandler(err);
}

export function apiKey() {
  try {
    return sessionStorage.getItem(KEY_STORAGE) || '';
  } catch {
    return '';
  }
}

// Throws when the browser does not allow session storage.
export function storeApiKey(key) {
  sessionStorage.setItem(KEY_STORAGE, key);
}

export function forgetApiKey() {
  sessionStorage.removeItem(KEY_STORAGE);
}

export function authHeaders(extra) {
  const headers = Object.assign({}, extra);
  const key = apiKey();
  if (key) headers.Authorization = 'Bearer ' + key;
  return headers;
}

// MARK: - Requests

// apiUrl('/v1/jobs', [['state', 'running'], ['label', 'a:b']]) — query pairs, repeats allowed.
export function apiUrl(path, query) {
  const url = new URL(path.replace(/^\//, ''), API_ROOT);
  if (query) for (const [k, v] of query) if (v !== undefined && v !== null && v !== '') url.searchParams.append(k, String(v));
  return url;
}

export async function readProblem(res) {
  const text = await res.text().catch(() => '');
  if (!text) return { title: res.statusText };
  try {
    return JSON.parse(text);
  } catch {
    return { detail: text.slice(0, 300) };
  }
}

export async function api(path, { method = 'GET', query, body, signal } = {}) {
  const init = { method, headers: authHeaders({ Accept: 'application/json' }), signal, cache: 'no-store' };
  if (body !== undefined) {
    init.headers['Content-Type'] = 'application/json';
    init.body = JSON.stringify(body);
  }
  const res = await fetch(apiUrl(path, query), init);
  if (res.status === 204) return null;
  if (!res.ok) {
    const err = new ApiError(res.status, await readProblem(res));
    if (res.status === 401) authRequired(err);
    throw err;
  }
  const text = await res.text();
  return text ? JSON.parse(text) : null;
}

export function jobPath(id, rest = '') {
  return '/v1/jobs/' + encodeURIComponent(id) + rest;
}

export function taskPath(jobId, taskId, rest = '') {
  return jobPath(jobId, '/tasks/' + encodeURIComponent(taskId) + rest);
}

export function isAbort(e) {
  return e && (e.name === 'AbortError' || e.name === 'TimeoutError');
}

// One line for a toast or an error card: title (status, code): detail — the first field errors.
export function problemText(err) {
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

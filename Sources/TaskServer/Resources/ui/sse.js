// sse.js — server-sent events read with fetch(), because EventSource cannot send an
// Authorization header: a parser of the text/event-stream format and a stream that reconnects
// with backoff and resumes with Last-Event-ID.

import { ApiError, apiUrl, authHeaders, authRequired, readProblem } from './api.js';
import { sleep } from './dom.js';

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
export class SSEStream {
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
          authRequired(err);
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

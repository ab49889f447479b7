// job-events.js — a job's events for its page (job-view.js): the stream (history, then live, from
// GET /v1/jobs/{id}/events?stream=true, resumed after the last seq; long-polling when the server
// answers without a stream), handed to the page once each in seq order, and the events table (the
// last EVENT_ROWS_SHOWN rows, appended once a frame).

import { api, isAbort, jobPath } from './api.js';
import { clip, compactJSON, fmtClock, h, sleep } from './dom.js';
import { SSEStream } from './sse.js';
import { TERMINAL_JOB_STATES } from './states.js';

const EVENT_ROWS_SHOWN = 1000;

export class JobEvents {
  // page: the JobPage (apply(ev), scheduleFrame(), nodeLink(id), job, ended, jobId, ctx);
  // el: its elements (streamState, eventsBody, eventsNote).
  constructor(page, el) {
    this.page = page;
    this.el = el;
    this.lastSeq = 0;
    this.events = []; // every event seen, in seq order
    this.pendingRows = []; // events not in the table yet
  }

  onEvent(ev) {
    if (typeof ev.seq !== 'number' || ev.seq <= this.lastSeq) return;
    this.lastSeq = ev.seq;
    this.events.push(ev);
    this.pendingRows.push(ev);
    this.page.apply(ev);
  }

  // Whether the stream has told all: the job ended and its events came.
  isDone() {
    const page = this.page;
    return page.ended && this.events.length > 0 && TERMINAL_JOB_STATES.has(page.job.state);
  }

  start() {
    const { page, el } = this;
    const setLive = (s) => {
      el.streamState.setAttribute('data-live', s);
      el.streamState.textContent = { live: 'live', reconnecting: 'reconnecting…', off: 'not live', ended: 'finished' }[s] || s;
    };
    page.ctx.stream(new SSEStream(jobPath(page.jobId, '/events'), {
      query: () => [['stream', 'true'], ['after', this.lastSeq]],
      onEvent: (msg) => {
        try {
          this.onEvent(JSON.parse(msg.data));
        } catch {
          // a malformed event is skipped; the next one carries on
        }
      },
      onStatus: setLive,
      isDone: () => this.isDone(),
      onFail: (e) => {
        if (e.status === 404) el.streamState.textContent = 'job gone';
      },
      // A server without streams answers with the JSON list: follow it by long-polling.
      onNotStream: (res) => {
        res.json().then((list) => {
          for (const ev of list.items || []) this.onEvent(ev);
          this.poll(setLive);
        }).catch(() => setLive('off'));
      },
    }));
  }

  async poll(setLive) {
    const { page } = this;
    setLive('live');
    while (!page.ctx.closed) {
      if (page.ended && TERMINAL_JOB_STATES.has(page.job.state)) {
        setLive('ended');
        return;
      }
      try {
        const list = await api(jobPath(page.jobId, '/events'), { query: [['after', this.lastSeq], ['waitMs', 20000], ['limit', 10000]], signal: page.ctx.signal });
        for (const ev of list.items) this.onEvent(ev);
      } catch (e) {
        if (page.ctx.closed || isAbort(e)) return;
        setLive('reconnecting');
        await sleep(2000);
      }
    }
  }

  // Appends the rows of the events that came since the last call (the page's frame calls it),
  // keeps the last EVENT_ROWS_SHOWN, and follows the end when the table was scrolled there.
  appendRows() {
    if (!this.pendingRows.length) return;
    const { eventsBody, eventsNote } = this.el;
    const wrap = eventsBody.closest('.events-wrap');
    const follow = !wrap || wrap.scrollTop + wrap.clientHeight >= wrap.scrollHeight - 40;
    const batch = this.pendingRows.splice(0);
    const fresh = batch.length > EVENT_ROWS_SHOWN ? batch.slice(batch.length - EVENT_ROWS_SHOWN) : batch;
    const frag = document.createDocumentFragment();
    for (const ev of fresh) frag.appendChild(this.row(ev));
    eventsBody.appendChild(frag);
    let extra = eventsBody.childElementCount - EVENT_ROWS_SHOWN;
    while (extra-- > 0) eventsBody.firstElementChild.remove();
    const n = this.events.length;
    eventsNote.textContent = n > EVENT_ROWS_SHOWN ? `Showing the last ${EVENT_ROWS_SHOWN} of ${n} events.` : `${n} events.`;
    if (follow && wrap) wrap.scrollTop = wrap.scrollHeight;
  }

  row(ev) {
    let data = '';
    if (ev.data !== undefined) data = compactJSON(ev.data);
    const dataCell = h('td', { class: 'data mono' }, clip(data, 160));
    if (data.length > 160) dataCell.title = clip(data, 4000);
    return h('tr', { testid: 'event-row', 'data-seq': ev.seq, 'data-type': ev.type },
      h('td', { class: 'num' }, String(ev.seq)),
      h('td', { class: 'nowrap mono' }, fmtClock(ev.time)),
      h('td', null, h('span', { class: 'etype', 'data-kind': ev.type.split('.')[1] }, ev.type)),
      h('td', null, ev.taskId ? this.page.nodeLink(ev.taskId) : ''),
      dataCell);
  }
}

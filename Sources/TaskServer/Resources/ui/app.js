// app.js — the TaskServer dashboard's entry: hash routing and the wiring of its modules.
// Hand-written ES modules, no dependencies, one file each (the server serves /ui/{file}):
//   states.js          the job and node states: names, final ones, ranks
//   dom.js             h(), badges, progress bars, formatting
//   api.js             the API client (the key, requests, problems)
//   sse.js             server-sent events over fetch() (EventSource cannot send Authorization)
//   dialogs.js         toasts, the confirmation dialog, the API key form
//   jobs-view.js       #/            the jobs list
//   job-view.js        #/jobs/{id}   a job: head, graph, timeline, deliveries
//   job-events.js                    … its event stream and events table
//   node-details.js                  … the node panel (details, cancel, the await form)
//   executors-view.js  #/executors   the executors and their workers
//   schedules-view.js  #/schedules   the cron schedules: next runs, create, pause, trigger, delete
//   graph.js           the job's node model, its layout and SVG drawing (graph and timeline)
// Every string from the server goes into the page through textContent or setAttribute, never as
// HTML, and nothing here needs inline script or eval (the page is served with a strict
// Content-Security-Policy).

import { ApiError, isAbort, problemText } from './api.js';
import { askForKey, setupKeyForm } from './dialogs.js';
import { h } from './dom.js';
import { executorsView } from './executors-view.js';
import { jobView } from './job-view.js';
import { jobsView } from './jobs-view.js';
import { schedulesView } from './schedules-view.js';

// What a view owns while it is shown: its requests (signal), timers, streams and cleanups, all
// ended when the next view replaces it.
class ViewContext {
  constructor(rerender) {
    this.ctrl = new AbortController();
    this.cleanups = [];
    this.closed = false;
    this.rerender = rerender;
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

// MARK: - Router

const router = {
  ctx: null,
  routes: [
    [/^\/?$/, 'jobs', (root, m, q, ctx) => jobsView(root, q, ctx)],
    [/^\/jobs\/([^/]+)$/, 'jobs', (root, m, q, ctx) => jobView(root, decodeURIComponent(m[1]), ctx)],
    [/^\/executors$/, 'executors', (root, m, q, ctx) => executorsView(root, ctx)],
    [/^\/schedules$/, 'schedules', (root, m, q, ctx) => schedulesView(root, ctx)],
  ],

  render() {
    if (this.ctx) this.ctx.close();
    const ctx = new ViewContext(() => this.render());
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
    box.appendChild(h('button', { type: 'button', class: 'primary', testid: 'open-key-form', onclick: () => askForKey(e) }, 'Enter an API key'));
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

// MARK: - Start

setupKeyForm(() => router.render());
window.addEventListener('hashchange', () => router.render());
router.render();

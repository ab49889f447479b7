// executors-view.js — #/executors: the executor pools (their queue by job priority, their rate
// limit), and the workers of the external ones, read from GET /v1/executors every 2 seconds.

import { api, isAbort, problemText } from './api.js';
import { fmtClock, fmtTime, h } from './dom.js';

// A pool's queuedByPriority ({"9": 2, "5": 10}) as '9: 2 · 5: 10', higher priorities first.
function byPriorityText(counts) {
  const entries = Object.entries(counts || {}).filter(([, n]) => typeof n === 'number' && n > 0);
  if (!entries.length) return '—';
  entries.sort((a, b) => Number(b[0]) - Number(a[0]));
  return entries.map(([p, n]) => `${p}: ${n}`).join(' · ');
}

// A pool's rate limit as 'rate 100/s, burst 10, tokens 3.2' (whole tokens are what may start now,
// so the tenths are cut, not rounded).
function rateText(rate) {
  const per = { second: '/s', minute: '/min' }[rate.per] || '/' + rate.per;
  const t = typeof rate.tokens === 'number' ? Math.floor(rate.tokens * 10) / 10 : rate.tokens;
  return `rate ${rate.limit}${per}, burst ${rate.burst}, tokens ${t}`;
}

export async function executorsView(root, ctx) {
  document.title = 'Executors · TaskServer';
  const body = h('div', { testid: 'executors' }, h('p', { class: 'muted' }, 'Loading…'));
  const stamp = h('span', { class: 'muted small' });
  root.appendChild(h('section', { class: 'card' },
    h('div', { class: 'title-row' }, h('h1', null, 'Executors'), stamp),
    h('p', { class: 'hint' }, 'In-process pools run built-in actions with a fixed number of slots; external pools hand tasks to your workers over HTTP. '
      + 'Each queue is counted by job priority (higher first, 0–9, default 5); a rate-limited pool starts at most its rate, tokens being what may start now. Refreshed every 2 seconds.'),
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
        h('td', { class: 'num nowrap', testid: 'executor-by-priority', title: 'queued tasks by job priority' }, byPriorityText(x.queuedByPriority)),
        h('td', { class: 'num' }, external ? '—' : String(x.completed)),
        h('td', { class: 'num' }, external ? String(x.leased) : '—'),
        h('td', { class: 'num' }, external ? String(x.workers) : '—'),
        x.rate ? h('td', { class: 'nowrap', testid: 'executor-rate' }, rateText(x.rate)) : h('td', { class: 'muted' }, '—')));
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
        tbody.appendChild(h('tr', { class: 'sub' }, h('td', { colspan: '10' }, h('div', { class: 'workers-box' }, h('strong', { class: 'small' }, `Workers of ${x.name}`), inner))));
      }
    }
    body.replaceChildren(h('div', { class: 'table-wrap' }, h('table', { class: 'executors', testid: 'executors-table' },
      h('thead', null, h('tr', null, ['Name', 'Kind', 'Size', 'Running', 'Queued', 'By priority', 'Completed', 'Leased', 'Workers', 'Rate limit'].map((t) => h('th', null, t)))),
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

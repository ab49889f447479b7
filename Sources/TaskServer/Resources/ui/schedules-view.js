// schedules-view.js — #/schedules: the cron schedules with their next runs, read from
// GET /v1/schedules every 5 seconds; a form creates one from JSON; each row pauses or resumes,
// triggers a run now, deletes (after a confirmation), and links to the schedule's jobs
// (#/?label=schedule:{id}).

import { api, isAbort, problemText } from './api.js';
import { confirmAction, toast } from './dialogs.js';
import { fmtClock, fmtTime, h } from './dom.js';

const EXAMPLE = {
  id: 'nightly-report',
  cron: '0 2 * * *',
  timezone: 'Europe/Paris',
  job: { graph: { type: 'task', action: 'value', params: { value: 'report' } } },
};

export async function schedulesView(root, ctx) {
  document.title = 'Schedules · TaskServer';
  const body = h('div', { testid: 'schedules' }, h('p', { class: 'muted' }, 'Loading…'));
  const stamp = h('span', { class: 'muted small' });
  const text = h('textarea', { testid: 'schedule-json', rows: '8', spellcheck: 'false', class: 'mono' });
  text.value = JSON.stringify(EXAMPLE, null, 2);
  const errors = h('div', { testid: 'schedule-errors', class: 'small' });
  const form = h('form', { class: 'schedule-form', testid: 'schedule-form' },
    h('label', null, 'A schedule (JSON: id?, cron, timezone?, job, overlap?, catchUp?, paused?)'), text, errors,
    h('button', { type: 'submit', class: 'primary', testid: 'schedule-create' }, 'Create'));
  form.addEventListener('submit', async (e) => {
    e.preventDefault();
    errors.replaceChildren();
    let definition;
    try {
      definition = JSON.parse(text.value);
    } catch (err) {
      errors.replaceChildren(h('p', { class: 'error' }, 'Not JSON: ' + err.message));
      return;
    }
    try {
      const created = await api('/v1/schedules', { method: 'POST', body: definition, signal: ctx.signal });
      toast(`Schedule ${created.id} created`, 'ok');
      await load();
    } catch (err) {
      if (isAbort(err)) return;
      const list = (err.problem && err.problem.errors) || [];
      errors.replaceChildren(h('p', { class: 'error' }, problemText(err)),
        ...list.map((p) => h('p', { class: 'error mono', testid: 'schedule-error' }, `${p.pointer}: ${p.message}`)));
    }
  });
  root.appendChild(h('section', { class: 'card' },
    h('div', { class: 'title-row' }, h('h1', null, 'Schedules'), stamp),
    h('p', { class: 'hint' }, 'Each fire submits the job with the label schedule=ID, at most once per fire time. Times are shown in your time zone; a schedule fires on the wall clock of its own. Refreshed every 5 seconds.'),
    body));
  root.appendChild(h('section', { class: 'card' }, h('h2', null, 'New schedule'), form));

  async function act(what, path, method, bodyValue) {
    try {
      const result = await api(path, { method, body: bodyValue, signal: ctx.signal });
      toast(what, 'ok');
      await load();
      return result;
    } catch (err) {
      if (!isAbort(err)) toast(problemText(err), 'error');
      return null;
    }
  }

  function row(s) {
    const enc = encodeURIComponent(s.id);
    const pause = h('button', { testid: 'schedule-pause', type: 'button' }, s.paused ? 'Resume' : 'Pause');
    pause.addEventListener('click', () => act(s.paused ? `${s.id} resumed` : `${s.id} paused`, '/v1/schedules/' + enc, 'PATCH', { paused: !s.paused }));
    const trigger = h('button', { testid: 'schedule-trigger', type: 'button' }, 'Run now');
    trigger.addEventListener('click', async () => {
      const job = await act(`${s.id}: a run started`, '/v1/schedules/' + enc + '/trigger', 'POST');
      if (job && job.id) location.hash = '#/jobs/' + encodeURIComponent(job.id);
    });
    const remove = h('button', { testid: 'schedule-delete', type: 'button', class: 'danger' }, 'Delete');
    remove.addEventListener('click', async () => {
      const ok = await confirmAction({ title: 'Delete schedule', message: `Delete schedule ${s.id}? Its jobs stay.`, ok: 'Delete' });
      if (ok) act(`${s.id} deleted`, '/v1/schedules/' + enc, 'DELETE');
    });
    const runs = (s.nextRuns || []);
    return h('tr', { testid: 'schedule-row', 'data-id': s.id, 'data-paused': String(s.paused) },
      h('td', { class: 'mono' }, s.id),
      h('td', { class: 'mono' }, s.cron),
      h('td', null, s.timezone),
      h('td', null, s.paused ? h('span', { class: 'muted', testid: 'schedule-paused' }, 'paused')
        : h('span', { testid: 'schedule-next' }, runs.length ? fmtTime(runs[0]) : 'never')),
      h('td', { class: 'small muted' }, runs.slice(1).map(fmtTime).join(' · ')),
      h('td', null, `${s.overlap} / ${s.catchUp}`),
      h('td', null, s.lastFireAt ? fmtTime(s.lastFireAt) : '—'),
      h('td', null, h('a', { href: '#/?label=' + encodeURIComponent('schedule:' + s.id), testid: 'schedule-jobs' }, 'jobs')),
      h('td', { class: 'nowrap' }, pause, ' ', trigger, ' ', remove));
  }

  async function load() {
    const list = await api('/v1/schedules?limit=1000', { signal: ctx.signal });
    if (ctx.closed) return;
    const items = list.items || [];
    body.replaceChildren(items.length === 0 ? h('p', { class: 'muted', testid: 'schedules-empty' }, 'No schedule yet.')
      : h('div', { class: 'table-wrap' }, h('table', { class: 'schedules', testid: 'schedules-table' },
        h('thead', null, h('tr', null, ['Id', 'Cron', 'Time zone', 'Next run', 'Then', 'Overlap / catch-up', 'Last fire', '', ''].map((t) => h('th', null, t)))),
        h('tbody', null, items.map(row)))));
    stamp.textContent = 'updated ' + fmtClock(new Date().toISOString());
  }

  await load();
  ctx.interval(() => {
    load().catch((e) => {
      if (!isAbort(e) && !ctx.closed) stamp.textContent = problemText(e);
    });
  }, 5000);
}

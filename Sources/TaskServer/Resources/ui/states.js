// states.js — the one table of job and node states for the whole dashboard: their names in
// display order, which ones are final, and the rank that keeps a late snapshot or a replayed event
// from moving a job or a node back (pending < running < an outcome). Colours are per state in
// style.css ([data-state=…]). Also what waiting work waits for (a node's or a job's `waitingFor`,
// a job's `tasksWaiting`: SPEC §8), in words.

export const JOB_STATES = ['pending', 'running', 'succeeded', 'failed', 'cancelled'];
export const NODE_STATES = ['pending', 'running', 'succeeded', 'failed', 'cancelled', 'skipped'];
export const TERMINAL_JOB_STATES = new Set(['succeeded', 'failed', 'cancelled']);
export const TERMINAL_NODE_STATES = new Set(['succeeded', 'failed', 'cancelled', 'skipped']);

// Jobs and nodes share it: a job is never `skipped`, the other ranks are the same.
const STATE_RANK = { pending: 0, running: 1, succeeded: 2, failed: 2, cancelled: 2, skipped: 2 };

// The rank of a state (an unknown one ranks as pending).
// A leaf of the graph: a task, or a job node (a task that runs a child job).
export function isLeaf(node) {
  return node.type === 'task' || node.type === 'job';
}

export function stateRank(state) {
  return STATE_RANK[state] ?? 0;
}

// A count of zero per node state, in NODE_STATES order.
export function zeroCounts() {
  const counts = {};
  for (const s of NODE_STATES) counts[s] = 0;
  return counts;
}

// How many of counts ({state: n}) are in a final state.
export function settledCount(counts) {
  let n = 0;
  for (const s of TERMINAL_NODE_STATES) n += counts[s] || 0;
  return n;
}

// MARK: - Waits

// The reasons an attempt (or a job) waits to start, in the order they are met: its concurrency
// key, a token of its pool's rate limit, a free slot of its pool.
export const WAIT_REASONS = ['concurrency', 'rate', 'slot'];
const NODE_WAIT_WORDS = { concurrency: 'waiting for its concurrency key', rate: 'waiting for a rate-limit token', slot: 'waiting for a free slot' };
const TASKS_WAIT_WORDS = { concurrency: 'a concurrency key', rate: 'the rate limit', slot: 'a slot' };

// A node's (or a job's) waitingFor in words: 'waiting for its concurrency key'.
export function waitWords(reason) {
  return NODE_WAIT_WORDS[reason] || `waiting (${reason})`;
}

// A job's tasksWaiting ({concurrency: 2, rate: 40}) in words: '2 tasks waiting for a concurrency
// key, 40 for the rate limit' ('' when nothing waits).
export function tasksWaitingText(tasksWaiting) {
  if (!tasksWaiting || typeof tasksWaiting !== 'object') return '';
  const reasons = WAIT_REASONS.concat(Object.keys(tasksWaiting).filter((r) => !WAIT_REASONS.includes(r)).sort());
  const parts = [];
  for (const r of reasons) {
    const n = tasksWaiting[r];
    if (typeof n !== 'number' || n <= 0) continue;
    const what = TASKS_WAIT_WORDS[r] || r;
    parts.push(parts.length ? `${n} for ${what}` : `${n} ${n === 1 ? 'task' : 'tasks'} waiting for ${what}`);
  }
  return parts.join(', ');
}

// Whether a job (GET /v1/jobs/{id}) says it or some of its tasks wait to start.
export function jobWaits(job) {
  return Boolean(job && !TERMINAL_JOB_STATES.has(job.state) && (job.waitingFor || tasksWaitingText(job.tasksWaiting)));
}

// states.js — the one table of job and node states for the whole dashboard: their names in
// display order, which ones are final, and the rank that keeps a late snapshot or a replayed event
// from moving a job or a node back (pending < running < an outcome). Colours are per state in
// style.css ([data-state=…]).

export const JOB_STATES = ['pending', 'running', 'succeeded', 'failed', 'cancelled'];
export const NODE_STATES = ['pending', 'running', 'succeeded', 'failed', 'cancelled', 'skipped'];
export const TERMINAL_JOB_STATES = new Set(['succeeded', 'failed', 'cancelled']);
export const TERMINAL_NODE_STATES = new Set(['succeeded', 'failed', 'cancelled', 'skipped']);

// Jobs and nodes share it: a job is never `skipped`, the other ranks are the same.
const STATE_RANK = { pending: 0, running: 1, succeeded: 2, failed: 2, cancelled: 2, skipped: 2 };

// The rank of a state (an unknown one ranks as pending).
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

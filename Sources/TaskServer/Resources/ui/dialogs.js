// dialogs.js — the page's own toasts, its confirmation <dialog> and the API key form (index.html
// holds their markup; nothing here writes HTML).

import { apiKey, forgetApiKey, onAuthRequired, storeApiKey } from './api.js';
import { appendAll, h } from './dom.js';

export function toast(message, kind = 'info') {
  const box = document.getElementById('toasts');
  const t = h('div', { class: 'toast ' + kind, testid: 'toast', role: kind === 'error' ? 'alert' : 'status' }, message);
  box.appendChild(t);
  setTimeout(() => t.remove(), kind === 'error' ? 9000 : 5000);
}

// confirmAction({title, message, ok, danger}) → Promise<boolean>, in the page's own <dialog>.
export function confirmAction({ title, message, ok = 'Confirm', danger = true }) {
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

// MARK: - The API key form

// Opens the key form (err: the 401's ApiError, or null when the user asks for it).
export function askForKey(err) {
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
}

// Wires the key form and the header's key button; onKeyChange() runs after a key is set or
// forgotten (the page redraws its view). Every 401 from the API opens the form.
export function setupKeyForm(onKeyChange) {
  onAuthRequired(askForKey);
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
      storeApiKey(key);
    } catch {
      document.getElementById('key-error').textContent = 'This browser does not allow session storage.';
      return;
    }
    input.value = '';
    delete document.body.dataset.authRequired;
    document.getElementById('key-dialog').close();
    updateKeyButton();
    onKeyChange();
  });
  document.getElementById('key-cancel').addEventListener('click', () => {
    document.getElementById('key-dialog').close();
  });
  document.getElementById('key-button').addEventListener('click', () => {
    if (apiKey()) {
      forgetApiKey();
      updateKeyButton();
      toast('The API key was forgotten (this tab no longer sends it).');
      onKeyChange();
    } else {
      askForKey(null);
    }
  });
  updateKeyButton();
}

function updateKeyButton() {
  const button = document.getElementById('key-button');
  const has = Boolean(apiKey());
  button.textContent = has ? 'Forget API key' : 'Set API key';
  button.setAttribute('data-testid', has ? 'forget-key' : 'set-key');
  button.title = has ? 'The key is kept in this tab only (sessionStorage).' : 'Only needed when the server runs with --api-key.';
}

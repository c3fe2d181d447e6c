/*
 * checkout.js: the payments demo's checkout page, and idemkit's reference
 * client for browsers (the counterpart of the Go package core/idemclient).
 * Plain JavaScript, no build step, no dependencies.
 *
 * How a browser pays exactly once over an unreliable network:
 *
 * 1. One key per payment. When the customer presses Pay for a new payment,
 *    the page makes a key with crypto.randomUUID() and sends it, quoted as
 *    an RFC 9651 sf-string, in the Idempotency-Key header:
 *        Idempotency-Key: "8e03978e-40d5-43e8-bc93-6894a57f9324"
 *    The key belongs to the payment, not to a request: every attempt of the
 *    payment sends the same key and the same body, and the server runs the
 *    payment once and answers the others with its recorded answer
 *    (Idempotent-Replayed: true).
 *
 * 2. Retry only what may succeed later, with the same key:
 *    - a network error, or an attempt that took longer than
 *      ATTEMPT_TIMEOUT_MS (the page stops waiting; the server may still be
 *      running it);
 *    - 409: the first attempt is still running; wait Retry-After;
 *    - 503 (and 408, 425, 429, and the other 5xx but those that say the
 *      request can never be served): nothing was recorded, try again.
 *    Never other 4xx: those are the payment's answer (declined, invalid),
 *    recorded by the server; sending it again gets the same answer.
 *    Between attempts the page waits an exponential backoff with full
 *    jitter (a random time below BASE_BACKOFF_MS doubled per attempt, at
 *    most MAX_BACKOFF_MS), and never less than the server's Retry-After.
 *    It stops after MAX_ATTEMPTS attempts, or once BUDGET_MS have passed,
 *    or when the server asks for a longer pause than MAX_BACKOFF_MS.
 *
 * 3. Pressing Pay again is safe. While a payment is under way, another
 *    press (a double-click) sends nothing. Once it has ended, Pay with the
 *    same account and the same form sends the same payment again, with the
 *    same key: after a timeout or a lost answer that is how the customer
 *    finds out what happened, and a payment that went through is not made
 *    twice. Only "New payment", or a change to the form, makes a new key.
 *    The payment under way is kept in sessionStorage, so a reload keeps
 *    its key too.
 *
 * The "Flaky network" switch adds the header "Demo-Network: flaky" to the
 * payments; the demo then fails their attempts on purpose (see the demo's
 * README), if its operator turned fault injection on: otherwise the page
 * comes with the switch disabled, and sends no such header. It is a
 * feature of the demo, not of the client.
 */
"use strict";

// The retry policy. The demo holds a flaky payment's first attempt for
// 4 s, longer than ATTEMPT_TIMEOUT_MS, so that the timeline shows a
// timeout and a 409.
const ATTEMPT_TIMEOUT_MS = 3000;
const MAX_ATTEMPTS = 6;
const BASE_BACKOFF_MS = 250;
const MAX_BACKOFF_MS = 5000;
const BUDGET_MS = 30000;

// newKey returns a fresh Idempotency-Key value: a random UUID as an
// sf-string, quotes included. crypto.randomUUID exists only in secure
// contexts (https, localhost, 127.0.0.1); elsewhere the UUID is made from
// crypto.getRandomValues, which every browser has.
function newKey() {
  let id;
  if (typeof crypto.randomUUID === "function") {
    id = crypto.randomUUID();
  } else {
    const b = crypto.getRandomValues(new Uint8Array(16));
    b[6] = (b[6] & 0x0f) | 0x40; // version 4
    b[8] = (b[8] & 0x3f) | 0x80; // RFC 9562 variant
    const hex = Array.from(b, (x) => x.toString(16).padStart(2, "0")).join("");
    id = `${hex.slice(0, 8)}-${hex.slice(8, 12)}-${hex.slice(12, 16)}-${hex.slice(16, 20)}-${hex.slice(20)}`;
  }
  return `"${id}"`;
}

// retryable reports whether an answer with this status may be different
// if the same request is sent again.
function retryable(status) {
  switch (status) {
    case 408: case 409: case 425: case 429:
      return true;
    case 501: case 505: case 506: case 508: case 510: case 511:
      return false; // the server can never serve this request as sent
  }
  return status >= 500 && status <= 599;
}

// retryAfterMs reads Retry-After (seconds or an HTTP date) in
// milliseconds, or null if absent or malformed.
function retryAfterMs(value) {
  if (value === null) return null;
  const v = value.trim();
  if (/^\d+$/.test(v)) return Number(v) * 1000;
  const at = Date.parse(v);
  return Number.isNaN(at) ? null : Math.max(at - Date.now(), 0);
}

// backoffMs is the wait after the attempt-th attempt: full jitter below a
// ceiling that doubles per attempt.
function backoffMs(attempt) {
  const ceiling = Math.min(MAX_BACKOFF_MS, BASE_BACKOFF_MS * 2 ** (attempt - 1));
  return Math.random() * ceiling;
}

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

// problemName returns the last segment of a problem's type URI
// ("request-in-progress"), or "" if body is not a problem.
function problemName(body) {
  if (!body || typeof body.type !== "string") return "";
  return body.type.slice(body.type.lastIndexOf("/") + 1);
}

// postIdempotent sends a POST with an Idempotency-Key and retries it,
// with the same key and body, as the policy above says. It calls onSend
// with each attempt's number as the attempt goes out, and onAttempt with
// the attempt's record as soon as its fate is known, and resolves to the
// payment's outcome:
//   {kind: "succeeded" | "refused" | "unknown", status, body, replayed}
// "unknown" means the retries ran out without an answer that settles the
// payment: it may or may not have happened, and sending it again with the
// same key finds out.
async function postIdempotent({ url, key, headers, body, onSend = () => {}, onAttempt = () => {} }) {
  const started = performance.now();
  for (let attempt = 1; ; attempt++) {
    const record = { attempt, key, status: null, problem: "", replayed: null, error: "", latencyMs: 0, retryInMs: null, retryAfterMs: null };
    const timeout = new AbortController();
    const timer = setTimeout(() => timeout.abort(), ATTEMPT_TIMEOUT_MS);
    onSend(attempt);
    const t0 = performance.now();
    let response = null;
    let json = null;
    try {
      response = await fetch(url, {
        method: "POST",
        headers: { ...headers, "Content-Type": "application/json", "Idempotency-Key": key },
        body,
        signal: timeout.signal,
        cache: "no-store",
        credentials: "omit",
      });
      const text = await response.text(); // within the timeout too
      try { json = JSON.parse(text); } catch { json = null; }
      record.status = response.status;
      record.replayed = response.headers.get("Idempotent-Replayed") === "true";
      record.problem = problemName(json);
    } catch (err) {
      record.error = timeout.signal.aborted ? "timeout" : "network error";
      response = null;
    } finally {
      clearTimeout(timer);
      record.latencyMs = Math.round(performance.now() - t0);
    }

    const again = response === null || retryable(response.status);
    if (!again) {
      onAttempt(record);
      const kind = response.ok ? "succeeded" : "refused";
      return { kind, status: response.status, body: json, replayed: record.replayed };
    }
    record.retryAfterMs = response ? retryAfterMs(response.headers.get("Retry-After")) : null;
    const wait = Math.max(record.retryAfterMs ?? 0, backoffMs(attempt));
    const spent = performance.now() - started;
    if (attempt >= MAX_ATTEMPTS || wait > MAX_BACKOFF_MS || spent + wait > BUDGET_MS) {
      onAttempt(record);
      return { kind: "unknown", status: record.status, body: json, replayed: record.replayed };
    }
    record.retryInMs = Math.round(wait);
    onAttempt(record);
    await sleep(wait);
  }
}

// ---------------------------------------------------------------------
// The page: the form, the timeline and the balance.

const STORE_ACCOUNT = "payments-demo.account";
const STORE_FLAKY = "payments-demo.flaky";
const STORE_PAYMENT = "payments-demo.payment";

const $ = (id) => document.getElementById(id);

// el builds an element with text content (never HTML: nothing the server
// or the customer typed is parsed as markup).
function el(tag, props = {}, ...children) {
  const e = document.createElement(tag);
  for (const [name, value] of Object.entries(props)) {
    if (name === "class") e.className = value;
    else if (name.startsWith("data-")) e.setAttribute(name, value);
    else e[name] = value;
  }
  for (const c of children) e.append(c);
  return e;
}

const page = {
  payment: null, // {key, order, view, seq}: the payment the Pay button sends
  running: false,
  count: 0,
};

function readOrder() {
  return {
    account: $("account").value.trim(),
    amount: $("amount").value.trim(),
    currency: $("currency").value,
    customer: $("customer").value,
  };
}

function sameOrder(a, b) {
  return a.account === b.account && a.amount === b.amount && a.currency === b.currency && a.customer === b.customer;
}

// validate marks the fields the server would refuse, and returns the
// first message, or "".
function validate(order) {
  const problems = [];
  const mark = (id, bad, message) => {
    $(id).setAttribute("aria-invalid", bad ? "true" : "false");
    if (bad) problems.push([id, message]);
  };
  mark("account", order.account === "", "Enter an account name: it is the bearer token.");
  mark("amount", !/^\d{1,8}$/.test(order.amount) || Number(order.amount) < 1, "Enter an amount from 1 to 99999999 cents.");
  mark("customer", order.customer.trim() === "", "Enter a customer.");
  if (problems.length === 0) return "";
  $(problems[0][0]).focus();
  return problems[0][1];
}

function showError(message) {
  const e = $("form-error");
  e.textContent = message;
  e.hidden = message === "";
}

function setStatus(text) {
  $("status").textContent = text;
}

function formatAmount(order) {
  const cents = Number(order.amount);
  try {
    return new Intl.NumberFormat("en", { style: "currency", currency: order.currency.toUpperCase() }).format(cents / 100);
  } catch {
    return `${cents} ${order.currency}`;
  }
}

// newPaymentView adds a payment to the top of the timeline.
function newPaymentView(payment) {
  const attempts = el("ol", { class: "attempts" });
  const view = el("li", { class: "payment", "data-key": payment.key },
    el("h3", {}, `Payment ${payment.seq}: ${formatAmount(payment.order)} from ${payment.order.customer}`),
    el("p", { class: "hint" }, "Idempotency-Key ", el("code", { class: "key" }, payment.key)),
    attempts);
  $("timeline").prepend(view);
  $("timeline-empty").hidden = true;
  return { view, attempts };
}

function addNote(payment, text) {
  payment.view.attempts.append(el("li", { class: "note" }, text));
}

function describeStatus(r) {
  if (r.error) return [r.error === "timeout" ? `no answer in ${ATTEMPT_TIMEOUT_MS / 1000} s` : "network error", "fail"];
  const text = `${r.status}${r.problem ? " " + r.problem : ""}`;
  if (r.status >= 200 && r.status < 300) return [text, "ok"];
  return [text, retryable(r.status) ? "wait" : "fail"];
}

// sendingAttempt adds the row of an attempt that has just gone out.
function sendingAttempt(payment) {
  payment.n += 1;
  payment.row = el("li", { class: "attempt", "data-attempt": String(payment.n), "data-status": "sending" },
    el("span", { class: "n" }, `Attempt ${payment.n}`),
    el("span", { class: "badge" }, "sent, waiting…"),
    el("code", { class: "key", title: "Idempotency-Key" }, payment.key));
  payment.view.attempts.append(payment.row);
}

// answeredAttempt fills in the row of the attempt whose fate is known.
function answeredAttempt(payment, r) {
  const [statusText, tone] = describeStatus(r);
  const then = r.retryInMs === null ? "" :
    `retry in ${(r.retryInMs / 1000).toFixed(1)} s` + (r.retryAfterMs !== null ? ` (Retry-After: ${r.retryAfterMs / 1000} s)` : "");
  const row = payment.row;
  row.setAttribute("data-status", r.error ? r.error : String(r.status));
  row.setAttribute("data-replayed", r.replayed === null ? "" : String(r.replayed));
  row.setAttribute("data-retry-in", r.retryInMs === null ? "" : String(r.retryInMs));
  row.replaceChildren(
    el("span", { class: "n" }, `Attempt ${payment.n}`),
    el("span", { class: `badge ${tone}` }, statusText),
    el("span", {}, `Idempotent-Replayed: ${r.replayed === null ? "–" : r.replayed ? "true" : "false"}`),
    el("span", { class: "latency" }, `${r.latencyMs} ms`),
    el("code", { class: "key", title: "Idempotency-Key" }, r.key));
  if (then) row.append(el("span", { class: "then" }, then));
  if (r.retryInMs !== null) {
    setStatus(`Paying… attempt ${payment.n} got ${statusText}; ${then}, with the same key.`);
  }
}

function addOutcome(payment, result) {
  let text;
  let tone;
  let kind = result.kind;
  if (result.kind === "succeeded") {
    const id = result.body && result.body.id ? result.body.id : "?";
    text = `Charged ${formatAmount(payment.order)}: ${id}${result.replayed ? " (the recorded answer, replayed)" : ""}`;
    tone = "ok";
    payment.view.view.setAttribute("data-charge", id);
  } else if (result.kind === "refused") {
    const detail = result.body && result.body.detail ? `: ${result.body.detail}` : "";
    text = `Not charged, ${result.status}${detail}`;
    tone = "fail";
  } else {
    text = "Unknown: the retries ran out before an answer. Press Pay to send this payment again with the same key.";
    tone = "wait";
  }
  payment.view.view.setAttribute("data-outcome", kind);
  payment.view.attempts.append(el("li", { class: `outcome ${tone}`, "data-outcome": kind }, text));
  setStatus(text);
}

function savePayment() {
  try {
    if (page.payment) {
      sessionStorage.setItem(STORE_PAYMENT, JSON.stringify({ key: page.payment.key, order: page.payment.order }));
    } else {
      sessionStorage.removeItem(STORE_PAYMENT);
    }
  } catch { /* storage may be disabled; the key then lives as long as the page */ }
}

async function pay() {
  if (page.running) {
    addNote(page.payment, "Pay pressed again while this payment is under way: nothing more sent.");
    return;
  }
  const order = readOrder();
  const invalid = validate(order);
  showError(invalid);
  if (invalid) return;

  if (page.payment && sameOrder(page.payment.order, order)) {
    if (!page.payment.view) page.payment.view = newPaymentView(page.payment);
    else addNote(page.payment, "Pay pressed again: the same payment, sent again with the same key.");
  } else {
    page.count += 1;
    page.payment = { key: newKey(), order, seq: page.count, n: 0 };
    page.payment.view = newPaymentView(page.payment);
  }
  const payment = page.payment;
  savePayment();

  page.running = true;
  $("pay").setAttribute("aria-busy", "true");
  setStatus(`Paying ${formatAmount(order)}…`);
  const headers = { Authorization: `Bearer ${order.account}` };
  if ($("flaky").checked && !$("flaky").disabled) headers["Demo-Network"] = "flaky";
  try {
    const result = await postIdempotent({
      url: "/v1/charges",
      key: payment.key,
      headers,
      body: JSON.stringify({ amount: Number(order.amount), currency: order.currency, customer: order.customer }),
      onSend: () => sendingAttempt(payment),
      onAttempt: (r) => answeredAttempt(payment, r),
    });
    addOutcome(payment, result);
  } finally {
    page.running = false;
    $("pay").removeAttribute("aria-busy");
  }
  refreshBalance();
}

// refreshBalance shows the account's balance.
async function refreshBalance() {
  const account = $("account").value.trim();
  const fields = ["charged", "refunded", "charges", "refunds"];
  const show = (b) => {
    for (const f of fields) $(`balance-${f}`).textContent = b ? String(b[f]) : "–";
    $("balance").setAttribute("data-account", b ? account : "");
  };
  if (account === "") return show(null);
  try {
    const response = await fetch("/v1/balance", { headers: { Authorization: `Bearer ${account}` }, cache: "no-store", credentials: "omit" });
    show(response.ok ? await response.json() : null);
  } catch {
    show(null);
  }
}

function newPayment() {
  page.payment = null;
  savePayment();
  setStatus("The next Pay starts a new payment, with a new key.");
}

function start() {
  const account = $("account");
  let saved = null;
  try {
    account.value = localStorage.getItem(STORE_ACCOUNT) || "acct_demo";
    // A switch the server disabled stays off, whatever this browser kept.
    $("flaky").checked = !$("flaky").disabled && localStorage.getItem(STORE_FLAKY) === "on";
    saved = JSON.parse(sessionStorage.getItem(STORE_PAYMENT) || "null");
  } catch {
    account.value = account.value || "acct_demo";
  }
  if (saved && typeof saved.key === "string" && saved.order) {
    // A payment this tab sent before a reload: pressing Pay with the same
    // form sends it again with its key.
    page.count += 1;
    page.payment = { key: saved.key, order: saved.order, seq: page.count, n: 0, view: null };
    $("amount").value = saved.order.amount;
    $("currency").value = saved.order.currency;
    $("customer").value = saved.order.customer;
    account.value = saved.order.account;
    setStatus("A payment from before the reload is pending: Pay sends it again with the same key.");
  }
  account.addEventListener("change", () => {
    try { localStorage.setItem(STORE_ACCOUNT, account.value.trim()); } catch { /* not kept */ }
    refreshBalance();
  });
  $("flaky").addEventListener("change", (e) => {
    try { localStorage.setItem(STORE_FLAKY, e.target.checked ? "on" : "off"); } catch { /* not kept */ }
  });
  $("checkout").addEventListener("submit", (e) => {
    e.preventDefault();
    pay();
  });
  $("new-payment").addEventListener("click", newPayment);
  document.documentElement.setAttribute("data-ready", "true");
  refreshBalance();
}

start();

/* Asking for a view's answer: one request per view at a time (a newer question aborts the older one), the
   busy state (the status line, the view's aria-busy and its greyed result) and the errors, each shown by the
   control at fault. body's data-busy counts requests in flight, data-aborted the requests aborted. */

import { api, GONE, serverGone } from "./api.js";
import { $ } from "./dom.js";
import { promptBox, state } from "./state.js";

const status = $("status");
let busy = 0, aborted = 0;

/* where a refusal of each field is shown, and the control it marks invalid */
const FIELDS = {
  prompt: ["prompt-error", "prompt"],
  temperature: ["next-sampling-error", "next-temperature"],
  top_k: ["next-sampling-error", "next-top-k"],
  top_p: ["next-sampling-error", "next-top-p"],
  seed: ["next-choice-error", "next-seed"],
  count: ["next-choice-error", "next-generate"],
  max_steps: ["train-steps-error", "train-steps"]
};

export function working(delta) {
  busy += delta;
  document.body.setAttribute("data-busy", String(busy));
  if (busy > 0) { status.textContent = "Working\u2026 (the results below are for the last question)"; status.className = "busy"; }
  else if (status.className === "busy") { status.textContent = ""; status.className = ""; }
}

/* an error: by the control at fault when the server named one, else in the status line */
export function fail(error) {
  var message = String(error.message || error), where = FIELDS[error.field];
  if (where) {
    var slot = $(where[0]);
    slot.textContent = message;
    slot.hidden = false;
    $(where[1]).setAttribute("aria-invalid", "true");
  } else {
    status.textContent = message;
    status.className = "error";
  }
}

function ok() {
  if (status.className === "error" && !serverGone()) { status.textContent = ""; status.className = ""; }
  for (var field in FIELDS) {
    $(FIELDS[field][0]).hidden = true;
    $(FIELDS[field][1]).removeAttribute("aria-invalid");
  }
}

const asked = {}, lastAnswer = {}, inFlight = {};

/* every answer kept is forgotten (the server's model changed) */
export function forget() { for (var view in lastAnswer) delete lastAnswer[view]; }

/* the view's result is about to be superseded (the learner typed, moved a slider): its request in flight is
   aborted and the result greyed at once, before the next question is asked */
export function superseded(view, marker) {
  if (inFlight[view]) {
    inFlight[view].abort();
    inFlight[view] = null;
    aborted += 1;
    document.body.setAttribute("data-aborted", String(aborted));
  }
  var section = marker || $("view-" + view);
  section.classList.add("stale");
  section.setAttribute("aria-busy", "true");
}

/* the text on screen as one request would send it: too long a body is refused here, in words a learner can
   act on */
function tooLong(body) {
  var limits = state.model, bytes = new TextEncoder().encode(JSON.stringify(body)).length;
  if (!limits || !limits.max_body || bytes <= limits.max_body) return null;
  var error = new Error("The text is " + promptBox.value.length.toLocaleString("en") + " characters (" +
    bytes.toLocaleString("en") + " bytes to send); the studio takes at most " + limits.max_body.toLocaleString("en") +
    " bytes: the tokenizer view up to " + limits.max_tokenizer_text.toLocaleString("en") + " characters, the other " +
    "views up to the model's context (" + limits.context + " tokens). Shorten it.");
  error.field = "prompt";
  return error;
}

/* An answer older than the view's last question is dropped, as is one for a prompt no longer on screen; the
   same question again (back to a view) is drawn from the last answer, not asked twice. body null: always asked.
   The view's section (or marker) gets data-ms (asked to drawn), data-ready (a counter of answers drawn) and
   data-asked (a counter of questions). */
export function ask(view, route, body, draw, marker) {
  superseded(view, marker);
  var n = (asked[view] = (asked[view] || 0) + 1), started = performance.now(), text = promptBox.value;
  var section = marker || $("view-" + view), key = body === null ? null : route + " " + JSON.stringify(body);
  section.setAttribute("data-asked", String(n));
  var last = lastAnswer[view], control = new AbortController(), refused = body && tooLong(body);
  inFlight[view] = control;
  var answer = refused ? Promise.reject(refused) : key !== null && last && last.key === key ?
    Promise.resolve(last.data) : api(route, body, control.signal);
  working(1);
  return answer.then(function (data) {
    if (n !== asked[view] || promptBox.value !== text) return;
    ok();
    lastAnswer[view] = { key: key, data: data };
    draw(data);
    section.classList.remove("stale");
    section.removeAttribute("aria-busy");
    section.setAttribute("data-ms", String(Math.round(performance.now() - started)));
    section.setAttribute("data-ready", String(n));
  }).catch(function (error) {
    if (error.name === "AbortError" || n !== asked[view]) return;
    section.removeAttribute("aria-busy");  /* still greyed: the result is not this question's */
    fail(serverGone() ? new Error(GONE) : error);
  }).then(function () {
    if (inFlight[view] === control) inFlight[view] = null;
    working(-1);
  });
}

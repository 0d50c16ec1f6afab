/* numforge studio: the page's entry module, for the studio (answers from the server's API) and for the page
   numforge inspect writes (the same answers, embedded; study/page.py inlines these modules there). It draws
   what the study functions computed and computes nothing about the model itself. This module holds the
   navigation: the tabs, the URL's #view, the prompt typed; each view is its own module. */

import { api, STATIC } from "./api.js";
import { fail, superseded } from "./ask.js";
import { attentionView } from "./attention.js";
import { chatView } from "./chat.js";
import { $ } from "./dom.js";
import { nextView } from "./next.js";
import { routingView } from "./routing.js";
import { promptBox, state } from "./state.js";
import { hideTip } from "./tip.js";
import { tokenizerView } from "./tokenizer.js";
import { traceView } from "./trace.js";
import { trainingView } from "./training.js";
import { walkthroughView } from "./walkthrough.js";

const VIEWS = {
  tokenizer: tokenizerView, next: nextView, walkthrough: walkthroughView, attention: attentionView, trace: traceView,
  training: trainingView, chat: chatView, routing: routingView
};
const SERVER_ONLY = ["training", "walkthrough", "chat", "routing"];  /* the views an inspector page disables */

function show(view) {
  if (view !== state.view && VIEWS[state.view].leave) VIEWS[state.view].leave();  /* a chat reply is stopped */
  state.view = view;
  document.body.setAttribute("data-view", view);
  document.querySelectorAll("#tabs button").forEach(function (b) {
    var on = b.getAttribute("data-view") === view;
    b.setAttribute("aria-selected", String(on));
    b.tabIndex = on ? 0 : -1;  /* one tab stop: the arrows move between the tabs */
  });
  document.querySelectorAll(".view").forEach(function (s) { s.hidden = s.id !== "view-" + view; });
  if (!STATIC) history.replaceState(null, "", location.pathname + location.search + "#" + view);
  hideTip();
  VIEWS[view].load();
}

let typing = null;
promptBox.addEventListener("input", function () {
  (VIEWS[state.view].supersede || function () { superseded(state.view); })();  /* greyed and aborted at once */
  clearTimeout(typing);
  typing = setTimeout(function () {
    state.ids = null;
    state.position = null;
    VIEWS[state.view].load();
  }, 250);
});

document.querySelectorAll("#tabs button").forEach(function (b) {
  b.addEventListener("click", function () { show(b.getAttribute("data-view")); });
});
/* the ARIA tabs pattern: Left/Right move to the previous/next tab (wrapping), Home/End to the first/last */
$("tabs").addEventListener("keydown", function (e) {
  var tabs = Array.from(document.querySelectorAll("#tabs button:not(:disabled)")), at = tabs.indexOf(document.activeElement);
  var to = { ArrowRight: at + 1, ArrowLeft: at - 1, Home: 0, End: tabs.length - 1 }[e.key];
  if (at < 0 || to === undefined) return;
  e.preventDefault();
  var tab = tabs[(to + tabs.length) % tabs.length];
  tab.focus();
  show(tab.getAttribute("data-view"));
});
/* a region that scrolls takes the focus, so the arrow keys scroll it */
new MutationObserver(function () {
  document.querySelectorAll(".scroll, .grid-box, .tokens").forEach(function (box) { if (box.tabIndex < 0) box.tabIndex = 0; });
}).observe(document.body, { childList: true, subtree: true });
document.addEventListener("scroll", hideTip, true);
window.addEventListener("hashchange", function () {
  var wanted = location.hash.slice(1);
  if (VIEWS[wanted] && wanted !== state.view && state.model) show(wanted);
});

/* an inspector page: the prompt it was written for, and no control that would need the server */
function readOnly() {
  $("mode").textContent = "inspect";
  promptBox.value = STATIC.prompt;
  promptBox.readOnly = true;
  $("prompt-info").textContent = "(numforge inspect wrote this page for this prompt; numforge studio takes any)";
  SERVER_ONLY.forEach(function (v) { document.querySelector('#tabs [data-view="' + v + '"]').disabled = true; });
  var n = STATIC.answers.next;  /* its one position: the prompt's chips there follow nothing */
  $("next-note").textContent = "One position's path from the model to a token, as numforge sample takes it: this " +
    "page holds it at the last position, " + n.position + ", at temperature " + n.temperature + (n.greedy ? ", greedy" :
    ", seed " + n.seed) + " (numforge studio follows any position and setting).";
  ["next-temperature", "next-top-k", "next-top-p", "next-seed"].forEach(function (id) { $(id).disabled = true; });
  document.querySelectorAll('input[name="next-choice"]').forEach(function (r) { r.disabled = true; });
}

api("/api/model").then(function (m) {
  state.model = m;
  $("model").textContent = (m.source || m.description) + (m.architecture ? ". " + m.architecture : "");
  if (STATIC) readOnly();
  else $("prompt-info").textContent = "up to " + m.context + " tokens (the model's context).";
  var wanted = location.hash.slice(1);
  show(VIEWS[wanted] && !(STATIC && SERVER_ONLY.includes(wanted)) ? wanted : STATIC ? "trace" : "next");
}).catch(fail);

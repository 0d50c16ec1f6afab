/* Asking for a view's answer: the status line, the page's count of requests in flight (body's data-busy),
   and one request per view at a time that counts. */

import { api } from "./api.js";
import { $ } from "./dom.js";

const status = $("status");
let busy = 0;

export function working(delta) {
  busy += delta;
  document.body.setAttribute("data-busy", String(busy));
}

export function fail(error) {
  status.textContent = String(error.message || error);
  status.className = "error";
}

function ok() { status.textContent = ""; status.className = ""; }

/* An answer older than the view's last question is dropped; the same question again (back to a view) is drawn
   from the last answer, not asked twice. body null: always asked. The view's section (or marker) gets data-ms
   (asked to drawn) and data-ready (a counter of answers drawn). */
const asked = {}, lastAnswer = {};
export function ask(view, route, body, draw, marker) {
  var n = (asked[view] = (asked[view] || 0) + 1), started = performance.now();
  var key = body === null ? null : route + " " + JSON.stringify(body);
  var last = lastAnswer[view];
  var answer = key !== null && last && last.key === key ? Promise.resolve(last.data) : api(route, body);
  working(1);
  return answer.then(function (data) {
    if (n !== asked[view]) return;
    ok();
    lastAnswer[view] = { key: key, data: data };
    draw(data);
    var section = marker || $("view-" + view);
    section.setAttribute("data-ms", String(Math.round(performance.now() - started)));
    section.setAttribute("data-ready", String(n));
  }).catch(function (error) {
    if (n === asked[view]) fail(error);
  }).then(function () { working(-1); });
}

/* The Next token view: one position's path from the model to a token, as numforge sample takes it (h, the
   logits, softmax at a temperature, top-k and top-p, the chosen token); "Append and step" and "Generate 10". */

import { STATIC } from "./api.js";
import { describe } from "./alt.js";
import { ask, superseded } from "./ask.js";
import { $, cell, clear, el, fmt, head, row, wrapCell } from "./dom.js";
import { sharp } from "./draw.js";
import { promptBody, state } from "./state.js";
import { chip, tokenStrip } from "./tokens.js";

/* the sampling settings of the controls, as the server's routes take them */
export function settings() {
  var k = $("next-top-k").value, p = $("next-top-p").value;
  return {
    temperature: Number($("next-temperature").value),
    top_k: k === "" ? null : Number(k),
    top_p: p === "" ? null : Number(p),
    greedy: document.querySelector('input[name="next-choice"]:checked').value === "greedy",
    seed: Number($("next-seed").value || 0)
  };
}

function showTemperature() {
  $("next-temperature-value").textContent = Number($("next-temperature").value).toFixed(2);
}

export const nextView = {
  tokens: null,
  answer: null,
  load: function () {
    showTemperature();
    ask("next", "/api/next", promptBody(Object.assign({ position: state.position }, settings())), function (d) {
      nextView.answer = d;
      nextView.draw(d);
    });
  },
  draw: function (d) {
    var tokens = d.tokens;
    this.tokens = tokens;
    if (!state.ids) state.promptLength = tokens.length;  /* the prompt box is the learner's: never written */
    $("next-generated-info").textContent = state.ids ? "Generated so far (after the " + state.promptLength +
      " tokens of the prompt; typing, or Back to the prompt, returns to the text in the box):" : "Generated so far:";
    tokenStrip($("next-tokens"), tokens, {
      selected: d.position,
      onClick: STATIC ? null : function (i) { state.position = i === tokens.length - 1 ? null : i; nextView.load(); },
      className: function (i) { return i >= state.promptLength ? "new" : ""; }
    });
    var label = function (id) { return d.labels[String(id)]; };
    $("next-h-eq").textContent = "h = the final norm's output at position " + d.position + ", read from " + d.hidden.source;
    drawHidden($("next-hidden"), d.hidden.first);
    describe($("next-hidden"), "The first " + d.hidden.first.length + " values of h as bars, up for positive, down for negative",
      ["component", "value"], d.hidden.first.map(function (v, k) { return [k, fmt(v)]; }));
    $("next-h-info").textContent = "\u2016h\u2016 = " + fmt(d.hidden.norm) + "; " + d.hidden.size + " values, the first " +
      d.hidden.first.length + " drawn (up: positive, down: negative)";
    $("next-z-info").textContent = d.vocab_size + " logits, from " + fmt(d.logits.min) + " to " + fmt(d.logits.max) +
      " (mean " + fmt(d.logits.mean) + ", std " + fmt(d.logits.std) + "); " + d.logits.source;
    $("next-kept").textContent = (d.top_k || d.top_p ? "top-k / top-p keep " : "every token is kept: ") +
      d.kept_count + " tokens, holding " + fmt(d.kept_mass) + " of p";
    drawProbabilities(clear($("next-table")), d, label);
    drawChosen(clear($("next-chosen")), d, label);
    tokenStrip($("next-generated"), tokens.slice(state.promptLength));
    var full = tokens.length >= state.model.context;
    $("next-step").disabled = full || STATIC !== null;
    $("next-generate").disabled = full || STATIC !== null;
    $("next-reset").disabled = !state.ids;
  }
};

/* the top tokens' rows: z, p = softmax(z / tau) and q (p over the kept tokens), with bars */
function drawProbabilities(table, d, label) {
  table.setAttribute("data-temperature", String(d.temperature));
  head(table, ["token", "id", "logit z", "p = softmax(z/\u03c4)", "", "q (kept)", ""]);
  var top = d.top[0][2];
  d.top.forEach(function (r) {
    var bar = el("span", "bar"), barQ = el("span", "bar q");
    bar.style.width = Math.round(120 * r[2] / top) + "px";
    barQ.style.width = Math.round(120 * r[3] / Math.max(top, d.top[0][3])) + "px";
    var tr = row(table, [cell(label(r[0]), "t"), String(r[0]), fmt(r[1]), fmt(r[2]), wrapCell(bar), fmt(r[3]), wrapCell(barQ)],
      r[0] === d.chosen.id ? "on" : "");
    tr.setAttribute("data-id", String(r[0]));
    tr.setAttribute("data-p", String(r[2]));
    tr.setAttribute("data-q", String(r[3]));
  });
}

function drawChosen(chosen, d, label) {
  chosen.appendChild(document.createTextNode((d.greedy ? "greedy: argmax z = " : "sampled (seed " + d.seed + "): ")));
  chosen.appendChild(chip(d.chosen.shown, d.chosen.id, "on"));
  chosen.appendChild(document.createTextNode("  p = " + fmt(d.chosen.p) + ", q = " + fmt(d.chosen.q) + "; bytes " +
    (d.chosen.bytes || "(none)") + " \u2192 text \u201c" + d.chosen.text + "\u201d"));
  if (d.target !== null) {
    chosen.appendChild(document.createTextNode("; the prompt's own next token here: "));
    chosen.appendChild(chip(label(d.target), d.target));
  }
  chosen.setAttribute("data-chosen", String(d.chosen.id));
}

/* h's first values as bars, up for positive, down for negative */
function drawHidden(canvas, values) {
  var width = Math.min(640, canvas.parentNode.clientWidth - 24), ctx = sharp(canvas, width, 40);
  var big = Math.max.apply(null, values.map(Math.abs)) || 1, w = width / values.length;
  values.forEach(function (v, i) {
    ctx.fillStyle = v >= 0 ? "#2563eb" : "#dc2626";
    var h = 19 * Math.abs(v) / big;
    ctx.fillRect(i * w, v >= 0 ? 20 - h : 20, Math.max(1, w - 1), h);
  });
}

function currentIds() { return nextView.tokens.map(function (t) { return t.id; }); }

/* follow ids from here: the last position, asked again */
function continueWith(ids) {
  state.ids = ids;
  state.position = null;
  nextView.load();
}

$("next-step").addEventListener("click", function () {
  var d = nextView.answer;
  if (!d) return;
  state.promptLength = Math.min(state.promptLength, d.position + 1);
  continueWith(currentIds().slice(0, d.position + 1).concat([d.chosen.id]));
});
/* the generation is the Next token view's question: typing or a new setting aborts it, and its tokens go to
   the generated strip only */
$("next-generate").addEventListener("click", function () {
  if (!nextView.tokens) return;
  var ids = currentIds(), room = state.model.context - ids.length;
  ask("next", "/api/generate", Object.assign({ ids: ids, count: Math.min(10, room) }, settings()), function (g) {
    continueWith(ids.concat(g.ids));
  }, $("next-generated"));
});
$("next-reset").addEventListener("click", function () { continueWith(null); });
["next-temperature", "next-top-k", "next-top-p", "next-seed"].forEach(function (id) {
  var timer = null;
  $(id).addEventListener("input", function () {
    showTemperature();
    superseded("next");
    clearTimeout(timer);
    timer = setTimeout(function () { nextView.load(); }, 120);
  });
});
document.querySelectorAll('input[name="next-choice"]').forEach(function (r) {
  r.addEventListener("change", function () { nextView.load(); });
});

/* The Walkthrough view: one position's path through the model, step by step, each with its shape, its numbers
   at the position and a sentence: the embedding, then in each block the norm, q, k, v of the head followed, its
   scores against every key, the mask, the softmax, the weighted sum, the output projection, the residual and
   the MLP, then the final norm (/api/walkthrough, read from the model's forward); then the logits, the softmax
   at the Next token view's temperature, its top-k and top-p and the token chosen (/api/next, at the same
   position). Nothing here is computed again. */

import { ask } from "./ask.js";
import { $, cell, clear, el, fmt, row } from "./dom.js";
import { settings } from "./next.js";
import { promptBody, state } from "./state.js";
import { tokenStrip } from "./tokens.js";

const KEYED = { scores: "S_j", mask: "S'_j", softmax: "P_j" };  /* the steps with one number per key */

export const walkthroughView = {
  head: 0,
  load: function () {
    var body = promptBody({ position: state.position, head: walkthroughView.head });
    ask("walkthrough", "/api/walkthrough", body, function (d) { walkthroughView.draw(d); });
  },
  draw: function (d) {
    tokenStrip($("walk-tokens"), d.tokens, { selected: d.position, onClick: walkTo });
    walkHeads(d);
    var list = clear($("walk-steps")), part = null;
    d.steps.forEach(function (s) {
      var title = s.layer === null ? (part && part.layer !== null ? "After the last block" : "Embedding") :
        "Block " + s.layer;
      if (!part || part.title !== title) part = { title: title, layer: s.layer, list: walkPart(list, title) };
      part.list.appendChild(walkStage(s, d));
    });
    /* each key table shows its last rows: the followed position's own key, and the later ones */
    list.querySelectorAll(".walk-keys").forEach(function (box) { box.scrollTop = box.scrollHeight; });
    ask("walk-sample", "/api/next", promptBody(Object.assign({ position: d.position }, settings())), drawWalkSampling,
      $("walk-sample"));
  }
};

/* a part of the path (the embedding, a block, the next token): its title and the list its steps go in */
function walkPart(list, title) {
  var li = list.appendChild(el("li", "walk-part"));
  li.appendChild(el("h3", null, title));
  return li.appendChild(el("ol", "walk-part-steps"));
}

function walkTo(i) { state.position = i; walkthroughView.load(); }

/* the head followed: a choice of the query heads, and which key/value head it reads */
function walkHeads(d) {
  var select = $("walk-head");
  if (select.options.length !== d.heads) {
    clear(select);
    for (var h = 0; h < d.heads; h++) select.appendChild(el("option", null, String(h)));
  }
  select.value = String(d.head);
  $("walk-head-info").textContent = "Query head " + d.head + " reads key/value head " + d.kv_head + " (" + d.heads +
    " query heads over " + d.kv_heads + " key/value heads). Position " + d.position + " is followed: \u201c" +
    d.tokens[d.position].shown + "\u201d.";
}

$("walk-head").addEventListener("change", function () {
  walkthroughView.head = Number($("walk-head").value);
  walkthroughView.load();
});

function shapeText(shape) { return "(" + shape.join(", ") + ")"; }

/* a step: its name, shape, sentence, equation and numbers (data-values, data-norm: the numbers as sent) */
function walkStep(name, shape, sentence, equation, numbers) {
  var li = el("li", "walk-step");
  li.appendChild(el("h4", null, name));
  if (shape) li.appendChild(el("p", "shape", (shape[0] === "(" ? "shape " : "") + shape));
  if (sentence) li.appendChild(el("p", null, sentence));
  if (equation) li.appendChild(el("p", "eq", equation));
  if (numbers) li.appendChild(el("p", "nums", numbers));
  return li;
}

function valuesText(values) { return "[" + values.map(function (v) { return fmt(v); }).join("  ") + "]"; }

function stageShape(s, d) {
  if (s.kind in KEYED) return shapeText(s.shape) + ": one number per key j = 0\u2026" + (s.shape[0] - 1) + ", head " + d.head;
  if (s.head !== undefined && s.shape.length === 2) return shapeText(s.shape) + " (H, D): query head " + s.head + "'s " + s.shape[1] + " values below";
  if (s.head !== undefined) return shapeText(s.shape) + " (D): query head " + s.head + "'s output";
  if (s.kv_head !== undefined && s.shape.length === 2) return shapeText(s.shape) + " (H_kv, D) at this position: key/value head " + s.kv_head + "'s below";
  return shapeText(s.shape);
}

function walkStage(s, d) {
  var keyed = s.kind in KEYED, shown = s.values.length < (keyed ? 0 : s.shape[s.shape.length - 1]);
  var numbers = keyed ? null : "\u2016\u00b7\u2016 = " + fmt(s.norm) + ";  " + (shown ? "the first " + s.values.length +
    " values " : "values ") + valuesText(s.values);
  var li = walkStep(s.name, stageShape(s, d), s.says, s.equation, numbers);
  li.setAttribute("data-kind", s.kind);
  li.setAttribute("data-layer", s.layer === null ? "" : String(s.layer));
  li.setAttribute("data-values", JSON.stringify(s.values));
  if (s.norm !== null) li.setAttribute("data-norm", String(s.norm));
  if (keyed) li.appendChild(keyTable(s, d));
  if (s.keys) li.appendChild(vectorTable(s, d));
  return li;
}

/* a key table's header, each name over its column: numbers right, the token and the vectors left */
function keyHead(table, names) {
  var tr = table.appendChild(el("tr"));
  names.forEach(function (n) {
    var left = n === "token" || n === "mask" || n === "" || n.indexOf("first values") === 0;
    tr.appendChild(el("th", left ? "t" : null, n));
  });
}

/* scores, mask, softmax: one row per key up to the position (later keys: one line), the token beside it */
function keyTable(s, d) {
  var box = el("div", "scroll walk-keys"), table = box.appendChild(el("table"));
  box.setAttribute("role", "region");
  box.setAttribute("aria-label", s.name + ", one row per key");
  keyHead(table, ["key j", "token"].concat(s.kind === "mask" ? ["mask"] : [], [KEYED[s.kind]], s.kind === "softmax" ? [""] : []));
  s.values.slice(0, d.position + 1).forEach(function (v, j) {
    var cells = [String(j), d.tokens[j].shown].concat(s.kind !== "mask" ? [] : [v === null ? "hidden (\u2212\u221e)" : "seen"],
      [v === null ? "\u2212\u221e" : fmt(v)]);
    if (s.kind === "softmax") {
      var bar = el("span", "bar"), td = el("td", "t");
      bar.style.width = Math.round(80 * v) + "px";
      td.appendChild(bar);
      cells.push(td);
    }
    row(table, cells, j === d.position ? "on" : "");
  });
  var later = s.values.length - d.position - 1;
  if (later > 0) {
    box.appendChild(el("p", "note", "Keys " + (d.position + 1) + "\u2026" + (s.values.length - 1) + " (" + later +
      ") come later" + (s.kind === "scores" ? "; the mask hides them." : s.kind === "mask" ? ": \u2212\u221e." : ": weight 0.")));
  }
  if (s.kind === "mask") box.appendChild(el("p", "note", s.hidden + " of " + s.values.length + " keys hidden in all."));
  return box;
}

/* k, v: each key's (value's) vector up to the position, its norm and first values */
function vectorTable(s, d) {
  var box = el("div", "scroll walk-keys"), table = box.appendChild(el("table")), letter = s.kind[0];
  box.setAttribute("role", "region");
  box.setAttribute("aria-label", s.name + ", one row per position");
  keyHead(table, ["j", "token", "\u2016" + letter + "_j\u2016", "first values of " + letter + "_j"]);
  s.keys.forEach(function (k, j) {
    row(table, [String(j), d.tokens[j].shown, fmt(k[0]), cell(valuesText(k.slice(1)), "t vals")], j === d.position ? "on" : "");
  });
  return box;
}

/* the last steps, from the next-token answer: logits, the softmax at tau, top-k and top-p, the choice */
function drawWalkSampling(n) {
  var list = walkPart(clear($("walk-sample")), "The next token"), label = function (id) { return n.labels[String(id)]; };
  var top = n.top.slice(0, 5), named = function (t, i) { return "\u201c" + label(t[0]) + "\u201d " + fmt(t[i]); };
  list.appendChild(walkStep("logits z = h W_U\u1d40", shapeText([n.vocab_size]), "One score per token of the vocabulary.",
    null, "min " + fmt(n.logits.min) + ", max " + fmt(n.logits.max) + ", mean " + fmt(n.logits.mean) + ", std " +
    fmt(n.logits.std) + "; the largest: " + top.map(function (t) { return named(t, 1); }).join(", ")));
  list.appendChild(walkStep("softmax at \u03c4 = " + n.temperature, shapeText([n.vocab_size]),
    "Divided by the temperature, exponentiated and normalized: probabilities that sum to 1. The Next token view " +
    "sets \u03c4.", "p = softmax(z / \u03c4)", "the largest: " + top.map(function (t) { return named(t, 2); }).join(", ")));
  list.appendChild(walkStep("top-k " + (n.top_k === null ? "(all)" : n.top_k) + ", top-p " + (n.top_p === null ? "(1)" : n.top_p),
    shapeText([n.vocab_size]) + ": q, 0 for every token not kept",
    "Only the likeliest tokens are kept (the k likeliest, then the fewest whose p adds up to top-p), and " +
    "renormalized to q.", "q = p over the kept tokens / their sum",
    n.kept_count + " of " + n.vocab_size + " tokens kept, holding p mass " + fmt(n.kept_mass)));
  var chosen = walkStep(n.greedy ? "greedy: argmax z" : "sample from q, seed " + n.seed, "one token id",
    "The token that comes next, appended to the prompt for the next step.", null,
    "\u201c" + n.chosen.shown + "\u201d (id " + n.chosen.id + "), p = " + fmt(n.chosen.p) + ", q = " + fmt(n.chosen.q));
  chosen.setAttribute("data-chosen", String(n.chosen.id));
  list.appendChild(chosen);
}

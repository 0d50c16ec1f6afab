/* The Attention view's overview (as bertviz's model view): every layer x head as a small pooled heatmap from
   /api/attention/overview, each a button that shows its layer and head; the heads' summaries as a table for a
   screen reader; under grouped-query attention, the query heads of one key/value head tinted alike. */

import { describe } from "./alt.js";
import { clear, el, fmt } from "./dom.js";
import { ramp, sharp, VIRIDIS } from "./draw.js";
import { decodeHalf } from "./heads.js";

const SIZE = 40;  /* a thumbnail's CSS pixels a side */

/* d: the overview's answer; on: [layer, head] shown; choose(layer, head) shows another */
export function drawOverview(box, d, on, choose) {
  var table = clear(box).appendChild(el("table", "overview")), tr = table.appendChild(el("tr"));
  tr.appendChild(el("th", null, "layer"));
  for (var h = 0; h < d.heads; h++) {
    var th = tr.appendChild(el("th", kvClass(d, h), "head " + h));
    if (grouped(d)) th.appendChild(el("small", null, "kv " + d.kv_head_of[h]));
  }
  var rows = [];
  for (var l = 0; l < d.layers; l++) {
    tr = table.appendChild(el("tr"));
    tr.appendChild(el("th", null, String(l)));
    for (h = 0; h < d.heads; h++) {
      tr.appendChild(el("td", kvClass(d, h))).appendChild(thumb(d, l, h, l === on[0] && h === on[1], choose));
      rows.push([l, h, d.kv_head_of[h]].concat(numbers(d.summaries[l][h])));
    }
  }
  describe(box, "Every layer x head of the attention: per head the mean entropy of a query's weights (nats), the " +
    "mean distance attended back (positions), the mean weight on the first and on the previous token.",
    ["layer", "head", "kv head", "entropy (nats)", "distance", "on first", "on previous"], rows);
}

function grouped(d) { return d.kv_head_of.some(function (g, h) { return g !== h; }); }

/* the tint of query head h's key/value head, under grouped-query attention */
function kvClass(d, h) { return grouped(d) ? "kv" + (d.kv_head_of[h] % 2) : null; }

function numbers(s) {
  return [fmt(s.entropy, 3), fmt(s.distance, 3), fmt(s.first, 3), s.previous === null ? "-" : fmt(s.previous, 3)];
}

/* layer l, head h in words, with its summary */
export function summaryText(d, l, h) {
  var n = numbers(d.summaries[l][h]);
  return "layer " + l + ", head " + h + (grouped(d) ? " (key/value head " + d.kv_head_of[h] + ")" : "") +
    ": entropy " + n[0] + " nats, distance " + n[1] + " positions, weight on the first token " + n[2] +
    ", on the previous " + n[3];
}

/* layer l, head h: its pooled weights (d.cells x d.cells, coloured 0 to its largest) as a button */
function thumb(d, l, h, on, choose) {
  var n = d.cells, w = decodeHalf(d.thumbs[l][h]), big = 0;
  for (var k = 0; k < w.length; k++) big = Math.max(big, w[k]);
  var button = el("button", "thumb" + (on ? " on" : "")), canvas = el("canvas"), ctx = sharp(canvas, SIZE, SIZE);
  ctx.fillStyle = "#fff";
  ctx.fillRect(0, 0, SIZE, SIZE);
  for (var a = 0; a < n; a++) {
    for (var b = 0; b < n; b++) {
      if (d.edges[b] > d.edges[a + 1] - 1) continue;  /* every key of the block after every query: hidden, white */
      ctx.fillStyle = "rgb(" + ramp(VIRIDIS, w[a * n + b] / (big || 1)).map(Math.round).join(",") + ")";
      ctx.fillRect(b * SIZE / n, a * SIZE / n, SIZE / n + 0.5, SIZE / n + 0.5);
    }
  }
  button.appendChild(canvas).setAttribute("aria-hidden", "true");
  button.setAttribute("aria-label", "show " + summaryText(d, l, h));
  button.setAttribute("aria-pressed", String(on));
  button.setAttribute("data-layer", String(l));
  button.setAttribute("data-head", String(h));
  button.title = summaryText(d, l, h);
  button.addEventListener("click", function () { choose(l, h); });
  return button;
}

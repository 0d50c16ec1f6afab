/* The Attention view's scores mode, one head from /api/attention/scores: S = s q k^T before the modifiers, S'
   after them, or the mask (the terms the modifiers add: 0 or -inf, a bias); a cell's q_i, k_j (of the key/value
   head the query head reads), their product times the scale (the score) and what the modifiers made of it. */

import { clear, el, fmt, head, row } from "./dom.js";
import { ramp, VIRIDIS } from "./draw.js";
import { decodeFloat } from "./heads.js";

export const SHOWS = {
  raw: "the scores S = s q\u00b7k before the mask and the modifiers",
  modified: "the scores S' = f(S) + the terms, after the mask and the modifiers (blank: -inf, hidden)",
  terms: "the mask: what the modifiers add to the scores (0, a bias; blank: -inf, hidden)"
};
const VALUES = 8;  /* the values of q_i and k_j written out */

/* d: the answer, decoded: at(name, i, j) of raw, capped, terms, modified; q(i), k(j) the (D,) vectors */
export function Scores(d) {
  var m = {};
  ["raw", "capped", "terms", "modified", "q", "k"].forEach(function (name) { m[name] = decodeFloat(d[name]); });
  return {
    answer: d,
    at: function (name, i, j) { return m[name][i * d.T + j]; },
    q: function (i) { return m.q.subarray(i * d.D, (i + 1) * d.D); },
    k: function (j) { return m.k.subarray(j * d.D, (j + 1) * d.D); },
    matrix: function (name) { return m[name]; }
  };
}

/* a score as text: -inf written out */
export function scoreText(v) { return isFinite(v) ? fmt(v, 5) : v < 0 ? "-inf (hidden)" : String(v); }

/* the colours of show: its finite entries low to high on viridis (all equal: the middle), -inf not drawn */
export function colours(sc, show) {
  var m = sc.matrix(show), lo = Infinity, hi = -Infinity;
  for (var k = 0; k < m.length; k++) if (isFinite(m[k])) { lo = Math.min(lo, m[k]); hi = Math.max(hi, m[k]); }
  if (lo === Infinity) lo = hi = 0;
  return {
    key: [fmt(lo, 3), fmt(hi, 3) + " (blank: -inf)"],
    rgb: function (i, j) {
      var v = sc.at(show, i, j);
      return isFinite(v) ? ramp(VIRIDIS, hi > lo ? (v - lo) / (hi - lo) : 0.5) : null;
    }
  };
}

/* cell (i, j) in table: q_i, k_j, q_i . k_j, times s the score S (the server's beside it), the modifiers'
   f(S) and terms, S', the weight; its numbers in table's data-cell for a test */
export function cellDetail(table, sc, labels, i, j, weight) {
  var d = sc.answer, q = sc.q(i), k = sc.k(j), dot = 0;
  for (var x = 0; x < d.D; x++) dot += q[x] * k[x];
  var vector = function (v) {
    return Array.from(v.subarray(0, VALUES), function (a) { return fmt(a, 3); }).join(", ") +
      (d.D > VALUES ? ", \u2026 (" + d.D + " values)" : "");
  };
  clear(table).appendChild(el("caption", null, "Layer " + d.layer + ", head " + d.head + " (key/value head " +
    d.kv_head + "): query " + i + " " + labels[i] + ", key " + j + " " + labels[j]));
  head(table, ["part", "value"]);
  [["q_" + i + " (head " + d.head + ")", vector(q)], ["k_" + j + " (key/value head " + d.kv_head + ")", vector(k)],
    ["q\u00b7k", fmt(dot, 5)], ["s = " + d.scale_text, fmt(d.scale, 5)],
    ["S = s q\u00b7k", fmt(dot * d.scale, 5) + " (sent: " + scoreText(sc.at("raw", i, j)) + ")"],
    ["modifiers: " + d.modifiers, d.softcap ? "f(S) = " + scoreText(sc.at("capped", i, j)) : "f(S) = S"],
    ["their terms", scoreText(sc.at("terms", i, j))], ["S' = f(S) + terms", scoreText(sc.at("modified", i, j))],
    ["P = softmax(S') (the weight)", weight === null ? "0 (hidden)" : fmt(weight, 4)]
  ].forEach(function (cells) { row(table, cells.map(String)).firstChild.className = "t"; });
  table.setAttribute("data-cell", JSON.stringify({ i: i, j: j, qk_s: dot * d.scale,
    raw: sc.at("raw", i, j), terms: String(sc.at("terms", i, j)), modified: String(sc.at("modified", i, j)) }));
}

/* The Forward and backward view: every stage of the forward pass and every gradient of the backward, read from
   the model's own caches, at a chosen position; the predictions at each position; the logit lens. */

import { describe } from "./alt.js";
import { ask, superseded } from "./ask.js";
import { $, cell, clear, el, fmt, head, row } from "./dom.js";
import { BLUES, drawKey, inkOn, ramp, redrawOnResize } from "./draw.js";
import { Grid } from "./grid.js";
import { promptBody, state } from "./state.js";
import { hideTip, showTip } from "./tip.js";
import { tokenStrip } from "./tokens.js";

export const traceView = {
  supersede: function () { superseded("trace"); superseded("lens", $("trace-lens")); },
  load: function () {
    ask("trace", "/api/trace", promptBody({ position: state.position }), function (d) { traceView.draw(d); });
  },
  draw: function (d) {
    var t = d.position;
    tokenStrip($("trace-tokens"), d.tokens, { selected: t, onClick: follow });
    $("trace-loss").textContent = d.loss === null ? "loss: none (one token: no target)" :
      "loss (mean cross-entropy of the " + (d.tokens.length - 1) + " next tokens): " + d.loss.toFixed(6);
    var atHead = "at position " + t + " (" + d.tokens[t].shown + "): \u2016\u00b7\u2016, first values";
    drawForward(clear($("trace-forward")), d.forward, atHead);
    drawPredictions(clear($("trace-predictions")), d);
    ask("lens", "/api/lens", promptBody(), function (lens) { drawLens(d, lens); }, $("trace-lens"));
    drawBackward(clear($("trace-backward")), d.backward, atHead);
  }
};

function follow(i) { state.position = i; traceView.load(); }

function drawForward(table, stages, atHead) {
  head(table, ["stage: its equation, the cache field it is read from", "shape", "mean", "std", "min", "max", atHead]);
  stages.forEach(function (s) {
    row(table, [stageCell(s.name, s.equation, "read from " + s.source), "(" + s.shape.join(",") + ")", fmt(s.mean),
      fmt(s.std), fmt(s.min), fmt(s.max), cell(atText(s.at), "t")]);
  });
}

/* each position's target, its probability and loss, and the top predictions; the followed position's row
   scrolled into the box */
function drawPredictions(table, d) {
  var t = d.position, label = function (id) { return d.labels[String(id)]; };
  head(table, ["pos", "token", "target (next token)", "p(target)", "loss", "top predictions"]);
  d.predictions.forEach(function (p, i) {
    var tr = row(table, [String(i), cell(d.tokens[i].shown, "t"), cell(p.target === null ? "(none: the end)" : label(p.target), "t"),
      fmt(p.target_prob), fmt(p.loss),
      cell(p.top.map(function (q) { return label(q[0]) + " " + fmt(q[1], 3); }).join(", "), "t")], i === t ? "on" : "");
    tr.addEventListener("click", function () { follow(i); });
  });
  if (t > 2) {
    var target = table.rows[t + 1];
    if (target) table.parentNode.scrollTop = target.offsetTop - 40;
  }
}

function drawBackward(table, stages, atHead) {
  head(table, ["upstream gradient d loss / d ...: its equation", "shape", "norm", "mean", "std", "max |.|", atHead]);
  stages.forEach(function (s) {
    row(table, [stageCell(s.name, s.equation, null), "(" + s.shape.join(",") + ")", fmt(s.norm), fmt(s.mean, 3),
      fmt(s.std, 3), fmt(s.max_abs, 3), cell(atText(s.at), "t")]);
    s.params.forEach(function (p) {
      row(table, [cell("    param " + p[0], "t"), "(" + p[1].join(",") + ")", fmt(p[2]), "", "", "", ""], "param");
    });
  });
  if (!stages.length) row(table, [cell("a one-token prompt has no target: no loss, no backward", "t")]);
}

/* the logit lens: rows the residual streams by depth, columns the positions, each cell its top-1 token */
function drawLens(d, lens) {
  var streams = lens.streams, T = d.tokens.length, top = lens.top;
  var label = function (id) { return lens.labels[String(id)]; };
  var grid = Grid($("trace-lens"), {
    rows: streams.length, cols: T, cellW: T > 200 ? 12 : 64, cellH: 22, left: 190, top: 70,
    rgb: function (i, j) { return ramp(BLUES, 0.85 * top[i][j][0][1]); },
    rowLabel: function (i) { return streams[i].name; },
    colLabel: function (j) { return j + " " + d.tokens[j].shown; },
    cellText: function (i, j) {
      return { text: label(top[i][j][0][0]), color: inkOn(ramp(BLUES, 0.85 * top[i][j][0][1])) };
    },
    mark: { row: -1, col: d.position },
    onHover: function (i, j, e) {
      if (i < 0) { hideTip(); return; }
      showTip([streams[i].name + " (" + streams[i].source + ")", "position " + j + " " + d.tokens[j].shown].concat(
        top[i][j].map(function (q) { return "  " + label(q[0]) + "  " + fmt(q[1], 3); })), e.clientX, e.clientY);
    }
  });
  describe($("trace-lens"), "The logit lens: rows the residual streams by depth, columns the positions, each cell the " +
    "token that stream would predict and its probability. The arrow keys move between the cells.",
    ["stream"].concat(d.tokens.map(function (t, j) { return j + " " + t.shown; })), streams.map(function (s, i) {
      return [s.name].concat(top[i].map(function (q) { return label(q[0][0]) + " " + fmt(q[0][1], 3); }));
    }));
  drawKey($("trace-lens-key"), BLUES, "p(top-1) 0", "1");
  redrawOnResize("lens", grid.draw);
}

function stageCell(name, equation, source) {
  var td = el("td", "stage");
  td.appendChild(el("div", "name", name));
  if (equation) td.appendChild(el("div", "eq", equation));
  if (source) td.appendChild(el("div", "src", source));
  return td;
}

/* a stage at the position: its norm, then its first values (only the norm on an inspector page) */
function atText(at) {
  if (!at) return "";
  if (at.length === 1) return fmt(at[0]) + "  (first values: in numforge studio)";
  return fmt(at[0]) + "  [" + at.slice(1).map(function (v) { return fmt(v); }).join(" ") + "]";
}

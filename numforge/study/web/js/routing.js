/* The Experts view: which experts each token of the prompt goes to, with its gates, layer by layer, as the
   MoE layers' forward chose them (/api/routing: study/routing.py reads ops/moe.py's cache); the router's
   probability of every expert at one layer; a model of dense MLPs is told it has no experts. */

import { ask } from "./ask.js";
import { $, cell, clear, el, fmt, head, row, wrapCell } from "./dom.js";
import { promptBody } from "./state.js";

export const routingView = {
  load: function () {
    ask("routing", "/api/routing", promptBody(), function (d) { routingView.draw(d); });
  },
  draw: function (d) {
    var routed = d.layers.filter(function (l) { return !l.dense; });
    $("route-details").hidden = !d.experts;
    if (!d.experts) {
      $("route-note").textContent = d.note;
      return;
    }
    $("route-note").textContent = "Each token goes to " + d.top_k + " of " + d.experts + " experts at every layer: " +
      "the " + d.top_k + " with the largest router probability (ties: the lower number), each weighted by its gate " +
      "in the layer's output" + (routed[0].renormalized ? " (the kept probabilities divided by their sum)" : "") +
      ". Read from " + d.source + ".";
    drawRouteChoices(clear($("route-table")), d);
    var select = $("route-layer"), wanted = Number(select.value) || 0;
    clear(select);
    routed.forEach(function (l) { select.appendChild(el("option", null, String(l.layer))).value = String(l.layer); });
    select.value = String(routed.some(function (l) { return l.layer === wanted; }) ? wanted : routed[0].layer);
    select.onchange = function () { drawRouteProbs(d); };
    drawRouteProbs(d);
  }
};

/* a chip per chosen expert: its number and gate, tinted by the expert, a bar as long as the gate */
function routeChip(expert, gate, experts) {
  var c = el("span", "route");
  c.style.setProperty("--hue", String(Math.round(360 * expert / experts)));
  c.appendChild(el("span", null, "expert " + expert + " "));
  c.appendChild(el("b", null, fmt(gate, 3)));
  var bar = el("span", "bar");
  bar.style.width = Math.round(40 * gate) + "px";
  c.appendChild(bar);
  return c;
}

/* rows the tokens, columns the layers: each cell the token's experts and gates; then each expert's load */
function drawRouteChoices(table, d) {
  head(table, ["pos", "token"].concat(d.layers.map(function (l) { return "layer " + l.layer; })));
  d.tokens.forEach(function (t, i) {
    row(table, [String(i), cell(t.shown, "t")].concat(d.layers.map(function (l) {
      if (l.dense) return cell("dense MLP", "t");
      var box = el("div", "routes");
      l.chosen[i].forEach(function (e, j) { box.appendChild(routeChip(e, l.gates[i][j], d.experts)); });
      return wrapCell(box);
    })));
  });
  row(table, [cell("", "t"), cell("tokens per expert", "t")].concat(d.layers.map(function (l) {
    return cell(l.dense ? "" : l.load.map(function (n, e) { return e + ": " + n; }).join("  "), "t");
  })), "param");
}

/* the chosen layer's router probabilities p (T, E), the chosen experts marked */
function drawRouteProbs(d) {
  var layer = Number($("route-layer").value), l = d.layers[layer], table = clear($("route-probs"));
  var experts = [];
  for (var e = 0; e < d.experts; e++) experts.push("expert " + e);
  head(table, ["pos", "token"].concat(experts));
  d.tokens.forEach(function (t, i) {
    row(table, [String(i), cell(t.shown, "t")].concat(l.probs[i].map(function (p, e) {
      var on = l.chosen[i].indexOf(e) >= 0;
      return cell(fmt(p, 3) + (on ? " \u2713" : ""), on ? "chosen" : null);
    })));
  });
}

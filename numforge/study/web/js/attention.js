/* The Attention view: a layer's heads as thumbnails, one head as a heatmap (rows queries, columns keys) or as
   lines; hover a cell for its weight and the model's top predictions after the query. */

import { STATIC } from "./api.js";
import { describe } from "./alt.js";
import { ask } from "./ask.js";
import { attentionLines } from "./attention-lines.js";
import { $, clear, el, fmt } from "./dom.js";
import { drawKey, ramp, redrawOnResize, sharp, VIRIDIS } from "./draw.js";
import { Grid } from "./grid.js";
import { Head, scaled, scaleKey } from "./heads.js";
import { promptBody, state } from "./state.js";
import { hideTip, showTip } from "./tip.js";
import { tokenStrip } from "./tokens.js";

export const attentionView = {
  answer: null,
  heads: null,
  grid: null,  /* the heatmap's Grid, null when drawn as lines */
  load: function () {
    fillChoices(state.model);
    ask("attention", "/api/attention", promptBody({ layer: state.layer, heads: null }), function (d) {
      attentionView.answer = d;
      attentionView.heads = d.weights.map(function (b64) { return Head(b64, d.T); });
      attentionView.draw();
    });
  },
  draw: function () {
    var d = this.answer, T = d.T, scale = $("att-scale").value, self = this;
    var labels = d.tokens.map(function (t) { return t.shown; });
    $("att-note").textContent = "Layer " + d.layer + ", head " + state.head + ": rows are queries, columns keys; the " +
      "masked upper triangle is blank; hover a cell for its weight. The " + d.path + " path's weights" +
      (d.path === "tiled" ? " (rebuilt from its saved log-sum-exp, P = exp(S - L))" : " (kept in its cache)") +
      ", sent as float16 (about 3 significant digits). " + sharing(state.model, state.head);
    tokenStrip($("att-tokens"), d.tokens, {
      onHover: function (i) { if (self.grid) self.grid.setMark(i, i); if (i >= 0) self.focus(i, -1); }
    });
    this.thumbs(scale);
    var headData = this.heads[state.head], value = scaled(headData, scale);
    var key = scaleKey(headData, scale);
    drawKey($("att-key"), VIRIDIS, key[0], key[1]);
    var box = $("att-main"), size = Number($("att-cell").value);
    var fitSize = Math.max(1, Math.min(32, Math.floor((box.parentNode.clientWidth - 100) / T)));
    describe(box, "Layer " + d.layer + ", head " + state.head + ": the attention weights, rows queries, columns keys. " +
      "The arrow keys move between the cells; the table lists each query's three strongest keys.",
      ["query", "its strongest keys: position token weight"], strongest(headData, labels));
    if ($("att-draw").value === "lines") {
      this.grid = null;
      return attentionLines(box, labels, value, function (i, j) { self.focus(i, j); });
    }
    this.grid = this.heatmap(box, labels, headData, value, size === 0 ? fitSize : size);
    redrawOnResize("attention", function () { self.draw(); });
  },
  heatmap: function (box, labels, headData, value, cellSize) {
    var d = this.answer, T = d.T, margin = cellSize >= 9 ? 90 : 0, self = this;
    return Grid(box, {
      rows: T, cols: T, cellW: cellSize, cellH: cellSize, left: margin, top: margin,
      rgb: function (i, j) { var v = value(i, j); return v === null ? null : ramp(VIRIDIS, v); },
      rowLabel: function (i) { return labels[i]; },
      colLabel: function (j) { return labels[j]; },
      onHover: function (i, j, e) {
        if (i < 0 || j > i) { hideTip(); self.grid.setMark(-1, -1); return; }
        self.grid.setMark(i, j);
        var w = headData.w(i, j);
        showTip(["layer " + d.layer + ", head " + state.head, "query " + i + " " + labels[i], "key   " + j + " " + labels[j],
          "weight " + w.toPrecision(4)], e.clientX, e.clientY);
        box.setAttribute("data-hover", i + "," + j + "," + w);
        self.focus(i, j);
      }
    });
  },
  focus: function (i, j) {
    var d = this.answer, p = d.predictions[i], label = function (id) { return d.labels[String(id)]; };
    var text = "query " + i + " " + d.tokens[i].shown + (j >= 0 ? ", key " + j + " " + d.tokens[j].shown : "") +
      "; the model's top predictions after position " + i + ": " +
      p.top.map(function (t) { return label(t[0]) + " " + fmt(t[1], 3); }).join(", ");
    $("att-focus").textContent = text;
  },
  thumbs: function (scale) {
    var box = clear($("att-thumbs")), self = this, m = state.model;
    this.kvOf = m.kv_head_of && m.kv_heads < m.heads ? m.kv_head_of : null;
    this.heads.forEach(function (headData, h) {
      var fig = el("figure", h === state.head ? "on" : ""), name = "head " + h + (self.kvOf ? " \u00b7 kv " + self.kvOf[h] : "");
      fig.appendChild(thumbnail(headData, scale, self.answer.T)).setAttribute("aria-hidden", "true");
      fig.appendChild(el("figcaption", null, name));
      pressable(fig, "show " + name, h === state.head, function () {
        state.head = h; $("att-head").value = String(h); self.draw();
      });
      box.appendChild(fig);
    });
  }
};

/* each query's three strongest keys, as text: [query, "key token weight, ..."] */
function strongest(headData, labels) {
  var out = [];
  for (var i = 0; i < labels.length; i++) {
    var keys = [];
    for (var j = 0; j <= i; j++) keys.push([j, headData.w(i, j)]);
    keys.sort(function (a, b) { return b[1] - a[1]; });
    out.push([i + " " + labels[i], keys.slice(0, 3).map(function (k) {
      return k[0] + " " + labels[k[0]] + " " + k[1].toPrecision(3);
    }).join(", ")]);
  }
  return out;
}

/* node a button by the keyboard too: a tab stop, Enter or Space runs act */
function pressable(node, name, pressed, act) {
  node.tabIndex = 0;
  node.setAttribute("role", "button");
  node.setAttribute("aria-label", name);
  node.setAttribute("aria-pressed", String(pressed));
  node.addEventListener("click", act);
  node.addEventListener("keydown", function (e) { if (e.key === "Enter" || e.key === " ") { e.preventDefault(); act(); } });
}

/* which key/value head query head h reads, and which query heads share it (grouped-query attention) */
function sharing(m, h) {
  if (!m.kv_head_of) return "";
  if (m.kv_heads === m.heads) return "Every head has its own keys and values (" + m.heads + " heads).";
  var g = m.kv_head_of[h], mates = [];
  m.kv_head_of.forEach(function (owner, q) { if (owner === g) mates.push(q); });
  return "Grouped-query attention: " + m.heads + " query heads share " + m.kv_heads + " key/value heads; head " + h +
    " reads key/value head " + g + ", with query heads " + mates.join(", ") + ".";
}

/* the layer and head choices, once: an inspector page holds layers 0..held-1, the others are studio-only */
function fillChoices(m) {
  var layerBox = $("att-layer"), headBox = $("att-head");
  if (layerBox.options.length) return;
  var held = STATIC ? STATIC.answers.attention.length : m.layers;
  for (var l = 0; l < m.layers; l++) {
    var option = layerBox.appendChild(el("option", null, l < held ? String(l) : l + " (numforge studio)"));
    option.value = String(l);
    option.disabled = l >= held;
  }
  for (var h = 0; h < m.heads; h++) headBox.appendChild(el("option", null, String(h)));
}

/* a head's whole T x T heatmap in 96 x 96 pixels */
function thumbnail(headData, scale, T) {
  var canvas = el("canvas"), ctx = sharp(canvas, 96, 96), off = document.createElement("canvas");
  off.width = off.height = T;
  var octx = off.getContext("2d"), image = octx.createImageData(T, T), px = image.data, value = scaled(headData, scale);
  for (var i = 0; i < T; i++) {
    for (var j = 0; j <= i; j++) {
      var c = ramp(VIRIDIS, value(i, j)), k = (i * T + j) * 4;
      px[k] = c[0]; px[k + 1] = c[1]; px[k + 2] = c[2]; px[k + 3] = 255;
    }
  }
  octx.putImageData(image, 0, 0);
  ctx.imageSmoothingEnabled = T > 96;
  ctx.drawImage(off, 0, 0, 96, 96);
  return canvas;
}

$("att-layer").addEventListener("change", function () { state.layer = Number(this.value); attentionView.load(); });
$("att-head").addEventListener("change", function () { state.head = Number(this.value); attentionView.draw(); });
["att-scale", "att-draw", "att-cell"].forEach(function (id) {
  $(id).addEventListener("input", function () { if (attentionView.answer) attentionView.draw(); });
});

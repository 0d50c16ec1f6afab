"""The fixed parts of the inspector page (``report.py``): its style and its one small script.

The script reads the page's embedded JSON (``<script id="data">``) and draws
each attention matrix on a canvas, rows = queries, columns = keys, the masked
upper triangle left blank; hovering a cell shows its query, key and weight.
It needs no network and no library; when done it sets ``data-drawn`` on the
attention section to the number of heatmaps drawn (the tests read it).
"""

STYLE = """
body { font: 14px/1.4 system-ui, sans-serif; margin: 1.5em; color: #222; max-width: 1400px; }
h1 { font-size: 1.4em; } h2 { font-size: 1.15em; margin-top: 1.8em; border-bottom: 1px solid #ccc; }
table { border-collapse: collapse; font: 12px/1.3 ui-monospace, monospace; }
td, th { padding: 1px 8px; border-bottom: 1px solid #eee; text-align: right; white-space: pre; }
th { background: #f4f4f4; } td.t, th.t { text-align: left; }
tr.param td { color: #666; }
.tok { display: inline-block; border: 1px solid #bbb; border-radius: 3px; margin: 2px; padding: 1px 4px;
       font: 12px ui-monospace, monospace; white-space: pre; }
.tok small { color: #888; }
.layer { display: flex; flex-wrap: wrap; gap: 12px; margin-bottom: 10px; }
figure { margin: 0; } figcaption { font-size: 12px; color: #555; }
#tip { position: fixed; pointer-events: none; background: #222; color: #fff; font: 12px ui-monospace, monospace;
       padding: 3px 6px; border-radius: 3px; display: none; white-space: pre; }
.note { color: #555; }
"""

SCRIPT = r"""
(function () {
  "use strict";
  var data = JSON.parse(document.getElementById("data").textContent);
  var tip = document.getElementById("tip");
  var stops = [[68, 1, 84], [59, 82, 139], [33, 145, 140], [94, 201, 98], [253, 231, 37]];
  function color(v) {
    var x = Math.max(0, Math.min(1, v)) * (stops.length - 1), i = Math.min(Math.floor(x), stops.length - 2), f = x - i;
    var a = stops[i], b = stops[i + 1];
    return "rgb(" + [0, 1, 2].map(function (c) { return Math.round(a[c] + f * (b[c] - a[c])); }).join(",") + ")";
  }
  var labels = data.tokens.map(function (t) { return JSON.stringify(t.text); });
  var T = labels.length, cell = Math.max(6, Math.min(26, Math.floor(360 / T))), margin = T <= 40 ? 80 : 4;
  function draw(canvas, matrix, layer, head) {
    var ctx = canvas.getContext("2d");
    canvas.width = canvas.height = margin + T * cell;
    ctx.font = "10px monospace";
    ctx.fillStyle = "#333";
    if (margin > 4) {
      for (var t = 0; t < T; t++) {
        var label = labels[t].length > 11 ? labels[t].slice(0, 10) + "\u2026" : labels[t];
        ctx.textAlign = "right";
        ctx.fillText(label, margin - 4, margin + t * cell + cell / 2 + 3);
        ctx.save();
        ctx.translate(margin + t * cell + cell / 2 + 3, margin - 4);
        ctx.rotate(-Math.PI / 2);
        ctx.textAlign = "left";
        ctx.fillText(label, 0, 0);
        ctx.restore();
      }
    }
    for (var i = 0; i < T; i++) {
      for (var j = 0; j < T; j++) {
        if (matrix[i][j] === null) continue;
        ctx.fillStyle = color(matrix[i][j]);
        ctx.fillRect(margin + j * cell, margin + i * cell, cell, cell);
      }
    }
    canvas.addEventListener("mousemove", function (event) {
      var box = canvas.getBoundingClientRect();
      var j = Math.floor((event.clientX - box.left - margin) / cell);
      var i = Math.floor((event.clientY - box.top - margin) / cell);
      if (i < 0 || j < 0 || i >= T || j >= T || matrix[i][j] === null) { tip.style.display = "none"; return; }
      tip.textContent = "layer " + layer + ", head " + head + "\nquery " + i + " " + labels[i] + "\nkey   " + j + " " +
        labels[j] + "\nweight " + matrix[i][j].toFixed(4);
      tip.style.left = event.clientX + 14 + "px";
      tip.style.top = event.clientY + 14 + "px";
      tip.style.display = "block";
    });
    canvas.addEventListener("mouseleave", function () { tip.style.display = "none"; });
  }
  var section = document.getElementById("attention"), drawn = 0;
  data.attention.weights.forEach(function (heads, layer) {
    var row = document.createElement("div");
    row.className = "layer";
    heads.forEach(function (matrix, head) {
      var figure = document.createElement("figure"), canvas = document.createElement("canvas");
      var caption = document.createElement("figcaption");
      caption.textContent = "layer " + layer + ", head " + head;
      figure.appendChild(canvas);
      figure.appendChild(caption);
      row.appendChild(figure);
      draw(canvas, matrix, layer, head);
      drawn += 1;
    });
    section.appendChild(row);
  });
  section.setAttribute("data-drawn", String(drawn));
})();
"""

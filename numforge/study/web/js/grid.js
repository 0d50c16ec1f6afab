/* A grid drawn only where it is seen: the attention heatmap and the logit lens. */

import { arrowKeys } from "./alt.js";
import { clear, el } from "./dom.js";
import { fit, sharp } from "./draw.js";

const MARK = "#e11d48", LABEL = "#333", FONT = "11px ui-monospace, monospace";

/* A rows x cols grid of cells in a scrolling box: only the visible cells are drawn, one pixel per cell into an
   image that is then scaled, so a 1024 x 1024 matrix costs what the screen shows. o: rows, cols, cellW, cellH,
   left, top (margins for the labels), rgb(i, j) -> [r, g, b] or null (not drawn), rowLabel(i), colLabel(j),
   cellText(i, j) (optional), onHover(i, j, event) with -1 outside, mark {row, col} (outlined). */
export function Grid(box, o) {
  clear(box);
  var sizer = el("div", "sizer"), canvas = el("canvas"), off = document.createElement("canvas");
  sizer.style.width = o.left + o.cols * o.cellW + "px";
  sizer.style.height = o.top + o.rows * o.cellH + "px";
  sizer.appendChild(canvas);
  box.appendChild(sizer);
  box.setAttribute("data-geometry", JSON.stringify({ left: o.left, top: o.top, cellW: o.cellW, cellH: o.cellH }));
  var grid = { mark: o.mark || { row: -1, col: -1 } };
  var pending = false;

  function draw() {
    pending = false;
    var v = visible(box, o);
    if (v.W <= 0 || v.H <= 0) return;
    var ctx = sharp(canvas, v.W, v.H);
    ctx.fillStyle = "#fff";
    ctx.fillRect(0, 0, v.W, v.H);
    if (v.j1 > v.j0 && v.i1 > v.i0) drawCells(ctx, off, o, v, grid.mark);
    drawLabels(ctx, o, v, grid.mark);
  }

  grid.draw = function () {
    if (!pending) { pending = true; requestAnimationFrame(draw); }
  };
  grid.setMark = function (r, c) { grid.mark = { row: r, col: c }; grid.draw(); };
  function hover(e) { var ij = cellAt(box, o, e); if (o.onHover) o.onHover(ij[0], ij[1], e); }
  box.onpointermove = hover;
  box.onpointerdown = hover;
  box.onpointerleave = function (e) {  /* a finger leaves at the end of every tap: keep what the tap showed */
    if (o.onHover && e.pointerType !== "touch") o.onHover(-1, -1, e);
  };
  box.onscroll = grid.draw;
  arrowKeys(box, o.rows, o.cols, function (i, j) { keyTo(box, o, i, j); });
  draw();
  return grid;
}

/* the keyboard's cell (i, j): scrolled into the box and shown as a pointer on it would be */
function keyTo(box, o, i, j) {
  box.scrollLeft = Math.max(0, Math.min(box.scrollLeft, j * o.cellW), (j + 1) * o.cellW + o.left - box.clientWidth);
  box.scrollTop = Math.max(0, Math.min(box.scrollTop, i * o.cellH), (i + 1) * o.cellH + o.top - box.clientHeight);
  var rect = box.getBoundingClientRect();
  var x = rect.left + o.left + (j + 0.5) * o.cellW - box.scrollLeft, y = rect.top + o.top + (i + 0.5) * o.cellH - box.scrollTop;
  if (o.onHover) o.onHover(i, j, { clientX: x, clientY: y, keyboard: true });
}

/* what the box shows: its size W x H, its scroll (sx, sy), the rows i0..i1-1 and the columns j0..j1-1 */
function visible(box, o) {
  var W = Math.min(box.clientWidth, o.left + o.cols * o.cellW), H = Math.min(box.clientHeight, o.top + o.rows * o.cellH);
  var sx = box.scrollLeft, sy = box.scrollTop;
  return {
    W: W, H: H, sx: sx, sy: sy,
    j0: Math.max(0, Math.floor(sx / o.cellW)), j1: Math.min(o.cols, Math.ceil((sx + W - o.left) / o.cellW)),
    i0: Math.max(0, Math.floor(sy / o.cellH)), i1: Math.min(o.rows, Math.ceil((sy + H - o.top) / o.cellH))
  };
}

/* the cell under a pointer event: [i, j], -1 where outside */
function cellAt(box, o, e) {
  var rect = box.getBoundingClientRect();
  var x = e.clientX - rect.left - o.left + box.scrollLeft, y = e.clientY - rect.top - o.top + box.scrollTop;
  var i = Math.floor(y / o.cellH), j = Math.floor(x / o.cellW);
  var inside = e.clientX - rect.left >= o.left && e.clientY - rect.top >= o.top;
  return inside && i >= 0 && j >= 0 && i < o.rows && j < o.cols ? [i, j] : [-1, -1];
}

/* the visible cells, one pixel each in off, scaled into ctx inside the margins; their text; the marked row and
   column outlined */
function drawCells(ctx, off, o, v, mark) {
  var nx = v.j1 - v.j0, ny = v.i1 - v.i0;
  off.width = nx;
  off.height = ny;
  var octx = off.getContext("2d"), image = octx.createImageData(nx, ny), px = image.data;
  for (var i = v.i0; i < v.i1; i++) {
    for (var j = v.j0; j < v.j1; j++) {
      var c = o.rgb(i, j);
      if (c === null) continue;
      var k = ((i - v.i0) * nx + (j - v.j0)) * 4;
      px[k] = c[0]; px[k + 1] = c[1]; px[k + 2] = c[2]; px[k + 3] = 255;
    }
  }
  octx.putImageData(image, 0, 0);
  ctx.save();
  ctx.beginPath();
  ctx.rect(o.left, o.top, v.W - o.left, v.H - o.top);
  ctx.clip();
  ctx.imageSmoothingEnabled = false;
  ctx.drawImage(off, o.left + v.j0 * o.cellW - v.sx, o.top + v.i0 * o.cellH - v.sy, nx * o.cellW, ny * o.cellH);
  if (o.cellText && o.cellW >= 26 && o.cellH >= 13) drawCellText(ctx, o, v);
  ctx.strokeStyle = MARK;
  ctx.lineWidth = 1.5;
  if (mark.row >= 0) ctx.strokeRect(o.left - v.sx, o.top + mark.row * o.cellH - v.sy, o.cols * o.cellW, o.cellH);
  if (mark.col >= 0) ctx.strokeRect(o.left + mark.col * o.cellW - v.sx, o.top - v.sy, o.cellW, o.rows * o.cellH);
  ctx.restore();
}

function drawCellText(ctx, o, v) {
  ctx.font = FONT;
  ctx.textBaseline = "middle";
  for (var i = v.i0; i < v.i1; i++) {
    for (var j = v.j0; j < v.j1; j++) {
      var t = o.cellText(i, j);
      if (t === null) continue;
      ctx.fillStyle = t.color || "#000";
      ctx.fillText(fit(ctx, t.text, o.cellW - 4), o.left + j * o.cellW - v.sx + 2, o.top + (i + 0.5) * o.cellH - v.sy);
    }
  }
}

/* the row labels in the left margin, the column labels turned up in the top margin; the marked ones in red */
function drawLabels(ctx, o, v, mark) {
  ctx.fillStyle = LABEL;
  ctx.font = FONT;
  ctx.textBaseline = "middle";
  if (o.left > 0 && o.cellH >= 9) {
    ctx.textAlign = "right";
    for (var i = v.i0; i < v.i1; i++) {
      var y = o.top + (i + 0.5) * o.cellH - v.sy;
      if (y <= o.top - 4) continue;
      ctx.fillStyle = i === mark.row ? MARK : LABEL;
      ctx.fillText(fit(ctx, o.rowLabel(i), o.left - 6), o.left - 4, y);
    }
  }
  if (o.top > 0 && o.cellW >= 9) {
    ctx.textAlign = "left";
    for (var j = v.j0; j < v.j1; j++) {
      var x = o.left + (j + 0.5) * o.cellW - v.sx;
      if (x < o.left - 4) continue;
      ctx.save();
      ctx.translate(x, o.top - 4);
      ctx.rotate(-Math.PI / 2);
      ctx.fillStyle = j === mark.col ? MARK : LABEL;
      ctx.fillText(fit(ctx, o.colLabel(j), o.top - 6), 0, 0);
      ctx.restore();
    }
  }
}

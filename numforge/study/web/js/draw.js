/* Drawing helpers: colour ramps and their key, canvases at the screen's density, text cut to a width, and
   what to draw again when the window's size changes. */

import { decorative } from "./alt.js";
import { clear, el } from "./dom.js";

export const VIRIDIS = [[68, 1, 84], [59, 82, 139], [33, 145, 140], [94, 201, 98], [253, 231, 37]];
export const BLUES = [[247, 251, 255], [198, 219, 239], [107, 174, 214], [33, 113, 181], [8, 48, 107]];

/* the colour at t in [0, 1] along stops, linearly between them: [r, g, b] */
export function ramp(stops, t) {
  var x = Math.max(0, Math.min(1, t)) * (stops.length - 1), i = Math.min(Math.floor(x), stops.length - 2), f = x - i;
  var a = stops[i], b = stops[i + 1];
  return [a[0] + f * (b[0] - a[0]), a[1] + f * (b[1] - a[1]), a[2] + f * (b[2] - a[2])];
}

/* the text colour on a cell of colour rgb with the larger contrast, white or black (at least 4.58:1 on any colour):
   relative luminance L = 0.2126 R + 0.7152 G + 0.0722 B of the linearized channels; white wins below L = 0.179 */
export function inkOn(rgb) {
  var lin = rgb.map(function (c) { c /= 255; return c <= 0.03928 ? c / 12.92 : Math.pow((c + 0.055) / 1.055, 2.4); });
  return 0.2126 * lin[0] + 0.7152 * lin[1] + 0.0722 * lin[2] < 0.179 ? "#fff" : "#000";
}

/* canvas sized width x height CSS pixels, drawn at devicePixelRatio: its context, in CSS pixels */
export function sharp(canvas, width, height) {
  var dpr = window.devicePixelRatio || 1;
  canvas.style.width = width + "px";
  canvas.style.height = height + "px";
  canvas.width = Math.max(1, Math.round(width * dpr));
  canvas.height = Math.max(1, Math.round(height * dpr));
  var ctx = canvas.getContext("2d");
  ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
  return ctx;
}

export function drawKey(box, stops, low, high) {
  clear(box);
  var canvas = el("canvas"), ctx = sharp(canvas, 200, 12);
  for (var x = 0; x < 200; x++) {
    var c = ramp(stops, x / 199);
    ctx.fillStyle = "rgb(" + c.map(Math.round).join(",") + ")";
    ctx.fillRect(x, 0, 1, 12);
  }
  decorative(canvas);
  box.appendChild(el("span", null, low));
  box.appendChild(canvas);
  box.appendChild(el("span", null, high));
}

/* text, cut with an ellipsis to fit width pixels in ctx's font */
export function fit(ctx, text, width) {
  if (ctx.measureText(text).width <= width) return text;
  var s = text;
  while (s.length > 1 && ctx.measureText(s + "\u2026").width > width) s = s.slice(0, -1);
  return s + "\u2026";
}

const redraws = {};
/* f runs again on every resize of the window; a later f of the same name replaces it */
export function redrawOnResize(name, f) { redraws[name] = f; }
window.addEventListener("resize", function () { Object.values(redraws).forEach(function (f) { f(); }); });

/* The tooltip: lines of text beside the pointer, kept inside the window. */

import { say } from "./alt.js";
import { $ } from "./dom.js";

const tip = $("tip");

export function showTip(lines, x, y) {
  tip.textContent = lines.join("\n");
  say(lines.join("; "));
  tip.hidden = false;
  var w = tip.offsetWidth, h = tip.offsetHeight;
  var left = x + 14 + w > innerWidth - 4 ? Math.max(4, x - 14 - w) : x + 14;
  var top = y + 14 + h > innerHeight - 4 ? Math.max(4, y - 14 - h) : y + 14;
  tip.style.left = left + "px";
  tip.style.top = top + "px";
}

export function hideTip() { tip.hidden = true; }

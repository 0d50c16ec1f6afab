/* The Tokenizer view: the chunks of the pre-split, each from its bytes to its tokens, the merges one rank at a
   time (a slider over the ranks). */

import { ask } from "./ask.js";
import { $, clear, el, plural } from "./dom.js";
import { promptBox } from "./state.js";
import { chip, tokenStrip } from "./tokens.js";

export const tokenizerView = {
  data: null,
  ranks: null,  /* every merge rank any chunk applies, in order */
  load: function () {
    ask("tokenizer", "/api/tokenize", { text: promptBox.value }, function (d) {
      tokenizerView.data = d;
      var ranks = [];
      d.chunks.forEach(function (c) { c.merges.forEach(function (m) { ranks.push(m.rank); }); });
      ranks = ranks.filter(function (r, i, all) { return all.indexOf(r) === i; }).sort(function (a, b) { return a - b; });
      tokenizerView.ranks = ranks;
      $("tok-summary").textContent = d.characters + " characters, " + d.bytes + " bytes, " + d.chunks.length +
        " chunks \u2192 " + d.tokens.length + " tokens";
      tokenStrip($("tok-tokens"), d.tokens);
      var slider = $("tok-step");
      slider.max = String(ranks.length);
      slider.value = String(ranks.length);
      tokenizerView.drawChunks();
    });
  },
  drawChunks: function () {
    var d = this.data, ranks = this.ranks, step = Number($("tok-step").value), box = clear($("tok-chunks"));
    var upTo = step === 0 ? -1 : ranks[step - 1];
    $("tok-step-info").textContent = step === 0 ? "0 of " + ranks.length + ": every chunk as its bytes" :
      step + " of " + ranks.length + ": merges up to rank " + upTo + " applied";
    var label = function (id) { return d.labels[String(id)]; };
    d.chunks.forEach(function (c, n) {
      var div = el("div", "chunk");
      div.appendChild(chunkLine(c, n, upTo, label));
      if (c.merges.length) div.appendChild(mergeList(c, label));
      box.appendChild(div);
    });
  }
};

/* chunk n: its text, then its tokens once the merges up to rank upTo apply (the last merge's tokens marked) */
function chunkLine(c, n, upTo, label) {
  var line = el("div", "line");
  line.appendChild(el("span", "what", "chunk " + (n + 1)));
  line.appendChild(el("code", null, c.shown));
  line.appendChild(el("span", "what", c.special ? "special, whole" : plural(c.start.length, "byte") +
    (c.whole ? ", a token whole (no merges) \u2192" : " \u2192")));
  var ids = c.whole ? c.ids : c.start, now = null;
  c.merges.forEach(function (m) { if (m.rank <= upTo) ids = m.ids; if (m.rank === upTo) now = m; });
  ids.forEach(function (id) {
    line.appendChild(chip(label(id), id, c.special ? "special" : now && id === now.id ? "merged" : ""));
  });
  return line;
}

function mergeList(c, label) {
  var details = el("details"), list = el("ol");
  details.appendChild(el("summary", null, plural(c.merges.length, "merge") + ", in rank order"));
  c.merges.forEach(function (m) {
    list.appendChild(el("li", null, "rank " + m.rank + ": [" + label(m.pair[0]) + "] + [" + label(m.pair[1]) +
      "] \u2192 id " + m.id));
  });
  details.appendChild(list);
  return details;
}

$("tok-step").addEventListener("input", function () { if (tokenizerView.data) tokenizerView.drawChunks(); });

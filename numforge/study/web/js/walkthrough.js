/* The Walkthrough view: one position's path through the model, step by step, each with its shape, its norm and
   first values at the position, and a sentence: the forward's stages as the trace reads them from the model's
   caches (/api/trace), then the logits, the softmax at the Next token view's temperature, its top-k and top-p and
   the token chosen (/api/next, at the same position). Nothing here is computed again. */

import { ask } from "./ask.js";
import { $, clear, el, fmt } from "./dom.js";
import { settings } from "./next.js";
import { promptBody, state } from "./state.js";
import { tokenStrip } from "./tokens.js";

/* what each kind of stage does, by a word of its name */
const STAGE_SAYS = [
  [/token embedding/, "The token's id picks its row of the embedding table: the token as a vector of C numbers."],
  [/position embedding/, "The position's own vector, added so the model can tell where the token stands."],
  [/embedding sum|residual stream|embedding/, "The stream every block reads from and adds to: the residual stream."],
  [/norm.* output/i, "Normalized to a fixed scale (times a learned gain) before the block's branch reads it."],
  [/ q$/, "The query: what this position looks for. Its dot products with every earlier key are the scores."],
  [/ k$/, "The keys: what each position offers to be found by; scores S = q k\u1d40 / \u221aD."],
  [/ v$/, "The values: what each position hands on when it is attended to."],
  [/heads merged/, "Scores q k\u1d40 / \u221aD, the causal mask (no later keys), softmax to weights P, the weighted " +
    "sum P v per head, the heads side by side. The Attention view draws P, S and the mask."],
  [/attention branch output/, "The output projection mixes the heads back into the stream's width."],
  [/residual/, "Added to the stream: each block only adds to what came before."],
  [/up_proj|gate_proj/, "The MLP widens the stream, one position at a time."],
  [/down_proj input/, "A nonlinearity, one number at a time."],
  [/MLP branch output|expert/, "Projected back to the stream's width."]
];

export const walkthroughView = {
  load: function () {
    ask("walkthrough", "/api/trace", promptBody({ position: state.position }), function (d) { walkthroughView.draw(d); });
  },
  draw: function (d) {
    tokenStrip($("walk-tokens"), d.tokens, { selected: d.position, onClick: walkTo });
    var list = clear($("walk-steps"));
    d.forward.forEach(function (s) { list.appendChild(walkStage(s)); });
    ask("walk-sample", "/api/next", promptBody(Object.assign({ position: d.position }, settings())), drawWalkSampling,
      $("walk-sample"));
  }
};

function walkTo(i) { state.position = i; walkthroughView.load(); }

function stageSays(name) {
  var found = STAGE_SAYS.filter(function (p) { return p[0].test(name); })[0];
  return found ? found[1] : "";
}

/* a step: its name, shape, sentence, equation and its numbers at the position (data-norm, data-first) */
function walkStep(name, shape, sentence, equation, numbers) {
  var li = el("li", "walk-step");
  li.appendChild(el("h3", null, name + (shape ? "  (" + shape.join(", ") + ")" : "")));
  if (sentence) li.appendChild(el("p", null, sentence));
  if (equation) li.appendChild(el("p", "eq", equation));
  li.appendChild(el("p", "nums", numbers));
  return li;
}

function walkStage(s) {
  var li = walkStep(s.name, s.shape, stageSays(s.name), s.equation, s.at ? "\u2016\u00b7\u2016 = " + fmt(s.at[0]) +
    "; first values [" + s.at.slice(1).map(function (v) { return fmt(v); }).join(" ") + "]" : "");
  if (s.at) {
    li.setAttribute("data-norm", String(s.at[0]));
    li.setAttribute("data-first", JSON.stringify(s.at.slice(1)));
  }
  return li;
}

/* the last steps, from the next-token answer: logits, the softmax at tau, top-k and top-p, the choice */
function drawWalkSampling(n) {
  var list = clear($("walk-sample")), label = function (id) { return n.labels[String(id)]; };
  list.appendChild(walkStep("logits z = h W_U\u1d40", [n.vocab_size], "One score per token of the vocabulary.", null,
    "min " + fmt(n.logits.min) + ", max " + fmt(n.logits.max) + ", mean " + fmt(n.logits.mean) + ", std " + fmt(n.logits.std)));
  list.appendChild(walkStep("softmax at \u03c4 = " + n.temperature, [n.vocab_size],
    "Divided by the temperature, exponentiated and normalized: probabilities that sum to 1.", "p = softmax(z / \u03c4)",
    "the largest: " + n.top.slice(0, 5).map(function (t) { return label(t[0]) + " " + fmt(t[2]); }).join(", ")));
  list.appendChild(walkStep("top-k " + (n.top_k === null ? "(all)" : n.top_k) + ", top-p " + (n.top_p === null ? "(1)" : n.top_p),
    null, "Only the likeliest tokens are kept and renormalized to q.", null,
    n.kept_count + " of " + n.vocab_size + " tokens kept, holding p mass " + fmt(n.kept_mass)));
  var chosen = walkStep(n.greedy ? "greedy: argmax z" : "sample from q, seed " + n.seed, null,
    "The token that comes next, appended to the prompt for the next step.", null,
    "\u201c" + n.chosen.shown + "\u201d (id " + n.chosen.id + "), p = " + fmt(n.chosen.p) + ", q = " + fmt(n.chosen.q));
  chosen.setAttribute("data-chosen", String(n.chosen.id));
  list.appendChild(chosen);
}

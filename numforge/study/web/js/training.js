/* The Training view: the run's loss.csv as it grows (asked again 2 s after each answer while shown), its learning rate,
   and the sample of its latest checkpoint. */

import { STATIC } from "./api.js";
import { ask } from "./ask.js";
import { chart } from "./chart.js";
import { $, fmt } from "./dom.js";
import { state } from "./state.js";

export const trainingView = {
  timer: null,
  load: function () {
    clearTimeout(this.timer);
    ask("training", "/api/training", null, function (d) {  /* asked again only after an answer: not once gone */
      trainingView.draw(d);
      if (!STATIC) trainingView.timer = setTimeout(function () { if (state.view === "training") trainingView.load(); }, 2000);
    });
  },
  draw: function (d) {
    var info = $("train-info");
    if (d.run === null) {
      info.textContent = "No run to follow: start the studio with --checkpoint RUN_DIR (a run of numforge train) or " +
        "--run RUN_DIR, and this view draws its loss.csv as it grows.";
      return;
    }
    var rows = d.rows, last = rows[rows.length - 1];
    var lnV = d.sample ? d.sample.ln_vocab : null;
    info.textContent = "run " + d.run + ": " + rows.length + " steps logged" + (last ? ", the last step " + last[0] +
      " (train loss " + fmt(last[1]) + (last[2] === null ? "" : ", validation " + fmt(last[2])) + ", learning rate " +
      fmt(last[3], 3) + ")" : "") + (d.sample ? "; the latest checkpoint is step " + d.sample.step : "") +
      ". The other views show the model the studio started with: " + (state.model.source || state.model.description) + ".";
    $("train-loss").setAttribute("data-rows", String(rows.length));
    chart($("train-loss"), rows, [
      { column: 1, color: "#2563eb", name: "train (per step)" },
      { column: 2, color: "#ea580c", name: "validation", dots: true }
    ], lnV === null ? null : { value: lnV, name: "ln V = " + lnV.toFixed(2) + " (uniform guessing)" }, "loss");
    chart($("train-lr"), rows, [{ column: 3, color: "#059669", name: "learning rate" }], null, "lr");
    $("train-sample").textContent = d.sample ? "step " + d.sample.step + " (temperature " + d.sample.temperature +
      ", seed " + d.sample.seed + "):\n" + d.sample.text : "(no checkpoint yet)";
  }
};

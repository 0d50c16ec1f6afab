/* The Training view: the run's loss.csv as it grows (asked again 2 s after each answer while shown), its learning rate,
   and the sample of its latest checkpoint. */

import { api, serverGone, STATIC } from "./api.js";
import { ask, fail, forget } from "./ask.js";
import { chart } from "./chart.js";
import { $, fmt } from "./dom.js";
import { state } from "./state.js";

export const trainingView = {
  timer: null,
  load: function () {
    clearTimeout(this.timer);
    ask("training", "/api/training", null, function (d) { trainingView.draw(d); }).then(function () {
      if (STATIC || serverGone()) return;  /* asked again 2 s after each answer or refusal; never once gone */
      trainingView.timer = setTimeout(function () { if (state.view === "training") trainingView.load(); }, 2000);
    });
  },
  draw: function (d) {
    var info = $("train-info");
    $("train-controls").hidden = d.run === null;
    if (d.trainer) drawTrainer(d.trainer);
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
      ". The other views show " + (state.model.source || state.model.description) + ".";
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

const TRAINER_STATES = {
  idle: "Not training here (start it, or watch a numforge train running in a terminal).",
  running: "Training: numforge train --resume is running, its steps logged below as they come.",
  stopping: "Stopping: the step under way finishes, a checkpoint is written, then it exits.",
  stopped: "Stopped"
};

/* the trainer's state, and which of its buttons apply */
function drawTrainer(t) {
  var words = TRAINER_STATES[t.state];
  if (t.state === "stopped") words += " (exit " + t.exit + (t.exit === 143 ? ": by Stop, after its checkpoint" : t.exit < 0 ?
    ": stopped before its training loop began, so no new checkpoint; Start resumes from the last one" : "") + ")." +
    (t.log.length ? " Its last output: " + t.log.join(" / ") : "");
  $("train-state").textContent = words;
  $("train-state").setAttribute("data-state", t.state);
  $("train-start").disabled = t.state === "running" || t.state === "stopping";
  $("train-stop").disabled = t.state !== "running";
}

function control(route, body) {
  api(route, body).then(function (t) { drawTrainer(t); trainingView.load(); }).catch(fail);
}

$("train-start").addEventListener("click", function () {
  control("/api/training/start", { max_steps: Number($("train-steps").value) });
});
$("train-stop").addEventListener("click", function () { control("/api/training/stop", {}); });
$("train-use").addEventListener("click", function () {
  api("/api/training/use-latest", {}).then(function (m) {
    state.model = m;
    forget();
    $("model").textContent = m.source + ". " + m.architecture;
    trainingView.load();
  }).catch(fail);
});

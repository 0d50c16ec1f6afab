"""Training: what starts a run (``spec``, ``start``), a run and its resume (``run``, ``state``), its loss log
(``logs``), the loop (``loop``)."""

from .dropout import dropout_rng
from .logs import LOSS_CSV, LOSS_PNG
from .loop import TrainingDiverged, evaluate, train, train_step
from .run import Run, new_run, resume_run
from .spec import RESUMABLE, RunSpec, TrainSettings
from .start import start_run

__all__ = [
    "LOSS_CSV",
    "LOSS_PNG",
    "RESUMABLE",
    "Run",
    "RunSpec",
    "TrainSettings",
    "TrainingDiverged",
    "dropout_rng",
    "evaluate",
    "new_run",
    "resume_run",
    "start_run",
    "train",
    "train_step",
]

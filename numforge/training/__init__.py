"""Training: a run's settings and state (``run``), its loss log (``logs``), the loop (``loop``)."""

from .dropout import dropout_rng
from .logs import LOSS_CSV, LOSS_PNG
from .loop import TrainingDiverged, evaluate, train, train_step
from .run import RESUMABLE, Run, TrainSettings, new_run, resume_run

__all__ = [
    "LOSS_CSV",
    "LOSS_PNG",
    "RESUMABLE",
    "Run",
    "TrainSettings",
    "TrainingDiverged",
    "dropout_rng",
    "evaluate",
    "new_run",
    "resume_run",
    "train",
    "train_step",
]

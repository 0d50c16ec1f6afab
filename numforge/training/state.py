"""A checkpoint's ``state.json``: what a run records besides its arrays, checked field by field from one table.

    {"step": 40, "world_size": 1, "threads": 2,
     "sampler": {"bit_generator": {...NumPy's PCG64 state...}, "batches_drawn": 40},
     "settings": {...TrainSettings...},
     "data": {"source": null, "num_tokens": 123456, "tokens_sha256": "...", "tokens_dir": null,
              "files": ["tokens.bin"], "source_options": {"glob": ..., "text_field": ..., "errors": ...}}}

``STATE_FIELDS`` maps each field (dotted: ``"sampler.batches_drawn"``) to its
check; ``check_state`` runs them in order, a field before the fields inside
it, and skips a field its object lacks when that object's own check allows
it (older checkpoints lack ``world_size``, ``threads``, ``grad_accum`` and
where the tokens are read). Every message names the file and the field.
"""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

from ..checks import check_int_value
from ..data.sources import ERRORS
from ..data.tokens import TOKENS_FILE
from .spec import TrainSettings

_SHA256 = re.compile(r"[0-9a-f]{64}")
DATA_FIELDS = {"source", "num_tokens", "tokens_sha256"}  # what a checkpoint records of its tokens
DATA_FIELDS_SINCE_PREPARE = {"tokens_dir", "files", "source_options"}  # and where they are read (absent before)
# a --chat run's: the directory whose template rendered its chat file, whether its examples were packed (absent
# in runs from before packing, which were not)
CHAT_FIELDS = {"chat_template_dir", "chat_packed"}
SETTINGS_FIELDS = {f.name for f in dataclasses.fields(TrainSettings)}
SOURCE_OPTIONS = {"glob", "text_field", "errors"}


def integer(minimum: int):
    """The check of an integer >= ``minimum``."""
    return lambda value, name: check_int_value(value, name, minimum=minimum)


def expect(holds, expected: str):
    """The check that ``holds(value)``, else "NAME must be EXPECTED, got VALUE"."""

    def check(value, name: str) -> None:
        if not holds(value):
            raise ValueError(f"{name} must be {expected}, got {value!r}")

    return check


def object_with(required: set, optional: set = frozenset(), expected: str | None = None):
    """The check of a JSON object with the fields ``required`` and any of ``optional`` (the message lists the
    fields it has)."""
    expected = expected or f"an object with the fields {sorted(required)}" + (
        f" and optionally {sorted(optional)}" if optional else ""
    )

    def check(value, name: str) -> None:
        if not (isinstance(value, dict) and required <= set(value) <= required | optional):
            got = f"the fields {sorted(value)}" if isinstance(value, dict) else repr(value)
            raise ValueError(f"{name} must be {expected}, got {got}")

    return check


def _name_or_null(value) -> bool:
    return value is None or isinstance(value, str) and value != ""


def _source_options(value) -> bool:
    return (
        isinstance(value, dict)
        and set(value) <= SOURCE_OPTIONS
        and all(isinstance(option, str) and option for option in value.values())
        and value.get("errors", "strict") in ERRORS
    )


STATE_FIELDS = {
    "": object_with({"step", "sampler", "settings", "data"}, {"world_size", "threads", "lora"}),  # the whole file
    "step": integer(0),
    "world_size": integer(1),
    "threads": integer(1),
    "sampler": object_with({"bit_generator", "batches_drawn"}),
    "sampler.batches_drawn": integer(0),
    "sampler.bit_generator": expect(lambda value: isinstance(value, dict), "an object (the generator's state)"),
    "data": object_with(
        DATA_FIELDS,
        DATA_FIELDS_SINCE_PREPARE | CHAT_FIELDS,
        "an object with 'source', 'num_tokens' and 'tokens_sha256' (and where they are read)",
    ),
    "data.source": expect(_name_or_null, "a path or null (the default corpus)"),
    "data.num_tokens": integer(1),
    "data.tokens_sha256": expect(lambda v: isinstance(v, str) and _SHA256.fullmatch(v), "64 lowercase hex digits"),
    "data.tokens_dir": expect(_name_or_null, "a directory or null (the cache)"),
    "data.chat_template_dir": expect(_name_or_null, "a directory (the model directory of the chat template)"),
    "data.chat_packed": expect(lambda value: isinstance(value, bool), "true or false (packed rows or one a row)"),
    "data.files": expect(lambda value: value == [TOKENS_FILE], f"[{TOKENS_FILE!r}]"),
    "data.source_options": expect(
        _source_options, f"an object of non-empty strings 'glob', 'text_field' and 'errors' (one of {ERRORS})"
    ),
    # grad_accum: 1 when absent, recompute: off (checkpoints written before they existed)
    "settings": object_with(SETTINGS_FIELDS - {"grad_accum", "recompute"}, {"grad_accum", "recompute"}),
    # a LoRA run's adapters (params.npz holds them alone) and the frozen model they adapt
    "lora": object_with({"rank", "alpha", "dropout", "targets", "base"}),
    "lora.base": expect(lambda v: isinstance(v, str) and v != "", "the path of the pretrained model"),
}


def check_state(state: dict, path: Path, step_in_name: int | None) -> TrainSettings:
    """The settings of a checkpoint's ``state.json``, every field of it checked; errors name the file and field."""
    for dotted, check in STATE_FIELDS.items():
        *parents, last = dotted.split(".") if dotted else [""]
        holder = state
        for key in parents:
            holder = holder.get(key, {})  # an optional object absent ("lora"): its fields are not checked
        if not dotted:
            check(state, f"{path}: the file")
        elif last in holder:
            check(holder[last], f"{path}: {dotted!r}")
    if step_in_name is not None and state["step"] != step_in_name:
        raise ValueError(f"{path}: 'step' is {state['step']} but its directory is named for step {step_in_name}")
    try:
        return TrainSettings(**state["settings"])
    except (ValueError, TypeError) as err:
        raise ValueError(f"{path}: 'settings': {err}") from err

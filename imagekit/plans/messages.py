"""A plan that does not validate, said as one PlanError naming the file and the key.

``manifests/demo.yaml: steps[2].destination: must be an absolute path``: pydantic's location
is spelt as the file has it (the discriminator level it inserts for a step is dropped), our
checks' hints (imagekit.plans.fields.fail) are kept, and an unknown key is answered with the
keys allowed there and the closest one.
"""

from __future__ import annotations

import difflib
from pathlib import Path
from typing import Any, get_args

from pydantic import BaseModel, ValidationError

from imagekit.errors import BaseDigestTruncated, PlanError
from imagekit.plans.model import Plan
from imagekit.plans.steps import STEP_KINDS, STEP_MODELS


def _format_loc(loc: tuple[int | str, ...]) -> str:
    """('steps', 2, 'overlay', 'destination') -> 'steps[2].destination' (tags dropped)."""
    out = ""
    previous: int | str | None = None
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        elif isinstance(previous, int) and part in STEP_KINDS:
            pass  # the discriminator pydantic inserts; the file has no such level
        else:
            out += f".{part}" if out else part
        previous = part
    return out


def _allowed_keys(loc: tuple[int | str, ...], data: Any) -> list[str]:
    """The keys a model at ``loc`` (an extra key's parent) accepts, for a did-you-mean hint."""
    model: type[BaseModel] | None = Plan
    node = data
    previous: int | str | None = None
    for part in loc:
        after_index, previous = isinstance(previous, int), part
        if isinstance(part, int):
            node = node[part] if isinstance(node, list) and part < len(node) else None
            kind = node.get("kind") if isinstance(node, dict) else None
            model = STEP_MODELS.get(str(kind)) if model is None else model
            continue
        if after_index and part in STEP_KINDS:
            # The discriminator level pydantic inserts, even where the step has a key of the
            # same name (a labels step's labels).
            continue
        if model is None or part not in model.model_fields:
            return []
        node = node.get(part) if isinstance(node, dict) else None
        model = _model_of(model, part)
    return sorted(model.model_fields) if model is not None else []


def _model_of(model: type[BaseModel], field: str) -> type[BaseModel] | None:
    """The model of a field that holds one (``X``, ``X | None``, ``list[X]``); None for any
    other field, and for the steps, whose model each item's kind names."""
    annotation = model.model_fields[field].annotation
    for candidate in (annotation, *get_args(annotation)):
        if isinstance(candidate, type) and issubclass(candidate, BaseModel):
            return candidate
    return None


def plan_error(exc: ValidationError, path: Path, data: Any) -> PlanError:
    error = exc.errors()[0]
    ctx = error.get("ctx") or {}
    loc = tuple(error["loc"])
    key = ctx.get("key") or _format_loc(loc) or None
    hint = ctx.get("hint")
    message = " / ".join(line.strip() for line in str(error["msg"]).splitlines() if line.strip())
    if error["type"] == "extra_forbidden":
        allowed = _allowed_keys(loc[:-1], data)
        message = "unknown key"
        close = difflib.get_close_matches(str(loc[-1]), allowed, n=1)
        if close:
            hint = f"did you mean {close[0]!r}? allowed here: {', '.join(allowed)}"
        elif allowed:
            hint = f"allowed here: {', '.join(allowed)}"
    elif error["type"] == "missing":
        message = "required key is missing"
    elif error["type"] == "digest_truncated":
        return BaseDigestTruncated(message, path=str(path), key=key, hint=hint)
    return PlanError(message, path=str(path), key=key, hint=hint)

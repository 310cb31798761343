"""What every model of a plan file shares: strict, frozen, unknown keys refused; and the
error a field's check raises, which carries our hint (and, for a check that spans several
fields, the key to name) to imagekit.plans.messages.

A plan is input from outside, so a misspelt ``destinaton`` must not be silently ignored, and
``exit_code: "0"`` is not an int.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict
from pydantic_core import PydanticCustomError


def fail(
    kind: str, message: str, hint: str | None = None, key: str | None = None
) -> PydanticCustomError:
    """A pydantic error carrying our hint (and a key, for checks that span several fields)."""
    ctx: dict[str, Any] = {"msg": message}
    if hint:
        ctx["hint"] = hint
    if key:
        ctx["key"] = key
    return PydanticCustomError(kind, "{msg}", ctx)


class StrictModel(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)

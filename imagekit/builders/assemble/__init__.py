"""Registry-native overlay builds: assemble an image from its base's blobs without an engine.

``imagekit build NAME --builder registry`` (or ``auto`` for a plan of overlays, env, labels,
entrypoint and cmd): the overlay layer, config and manifest are written here and pushed next
to the base's blobs, which the registry keeps; the base is never pulled. Modules:

- ``index``: what each base layer holds, cached by its compressed digest;
- ``guard``: the base's merged filesystem from those indexes, and each overlay's check;
- ``layer``: the reproducible tar + gzip writer, diffID and digest in one pass;
- ``config``: the base config and manifest edited as JSON, every field kept;
- ``check``: the plan's assertions in the pushed image, native or emulated, or NOT RUN;
- ``builder``: the flow and its evidence, one step a function;
- ``result``: what a registry build is asked and what it answers;
- ``run``: one build under way, the state its steps pass on;
- ``records``: its provenance and its ledger records, the flow's last step.

`imagekit build`'s choice between this builder and the engine's is imagekit.builders.choice,
beside this package.
"""

from imagekit.builders.assemble.builder import assemble_plan, engine_steps
from imagekit.builders.assemble.result import AssembleOptions, AssembleResult

__all__ = [
    "AssembleOptions",
    "AssembleResult",
    "assemble_plan",
    "engine_steps",
]

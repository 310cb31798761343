"""The two probes' shared pieces, held equal.

The audit's probe (imagekit/audit/probe.py) and the GPU preflight's (imagekit/gpu/probe.py)
each run alone inside an image, as one standard-library file: neither can import the other or
imagekit. So the pieces they share are copies, and this test is what keeps them one rule:
``covers`` (which compiled CUDA arches run on a capability) must be the same code in both,
and the GPU-name rule the probe applies must be the rule the gate applies to a signed
verdict (imagekit/kinds/gpu_preflight.py, which may use newer syntax, so it is held equal by
behaviour).
"""

from __future__ import annotations

import ast
from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

from imagekit.audit import probe as audit_probe
from imagekit.gpu import probe as gpu_probe
from imagekit.kinds import gpu_preflight

PACKAGE = Path(audit_probe.__file__).resolve().parents[1]


def _function(path: Path, name: str) -> str:
    """The function's code as ast.unparse writes it, its docstring dropped."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    for node in tree.body:
        if isinstance(node, ast.FunctionDef) and node.name == name:
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
                node.body = body[1:]
            return ast.unparse(node)
    raise AssertionError(f"{path.name} has no function {name}")


def test_covers_is_the_same_code_in_both_probes() -> None:
    audit = _function(PACKAGE / "audit" / "probe.py", "covers")
    gpu = _function(PACKAGE / "gpu" / "probe.py", "covers")
    assert audit == gpu, "the probes' covers() differ: change both, or neither"


def test_the_comparison_sees_a_difference() -> None:
    # the check above must be able to fail: a one-character change is a difference
    audit = _function(PACKAGE / "audit" / "probe.py", "covers")
    assert audit.replace("amin <= minor", "amin < minor") != audit


_ARCH = st.builds(
    lambda kind, value, suffix: f"{kind}_{value}{suffix}",
    st.sampled_from(["sm", "compute", "gfx"]),
    st.integers(min_value=30, max_value=130),
    st.sampled_from(["", "a", "f"]),
)


@given(st.lists(_ARCH, max_size=6), st.integers(3, 13), st.integers(0, 9))
def test_covers_answers_alike_in_both_probes(arches: list[str], major: int, minor: int) -> None:
    assert audit_probe.covers(arches, major, minor) is gpu_probe.covers(arches, major, minor)


_TOKEN = st.text(alphabet="ABHLGRTX0123456789-", min_size=1, max_size=6)


@given(_TOKEN, st.lists(_TOKEN, min_size=1, max_size=4))
def test_the_probe_and_the_gate_read_a_gpu_name_alike(pattern: str, words: list[str]) -> None:
    name = "NVIDIA " + " ".join(words)
    assert gpu_probe.name_matches(pattern, name) is gpu_preflight.name_matches(pattern, name)

"""Reading a failed BuildKit log: the failing step, why, and its last lines.

The logs below are shaped like Docker 20.10's BuildKit plain progress; the integration tests
check the same analysis against real failed builds.
"""

from __future__ import annotations

import pytest

from imagekit.builders.buildkit import analyse_failure
from imagekit.builders.push import check_push_repo
from imagekit.errors import ReferenceFormatError, UsageError

GUARD = 'p=/usr/lib/x.py; echo "IMAGEKIT_OVERLAY_DRIFT path=$p expected=$w actual=missing"'
DRIFT_LOG = f"""\
#5 [2/4] RUN {GUARD}
#5 sha256:aa
#5 0.101 IMAGEKIT_OVERLAY_DRIFT path=/usr/lib/x.py expected=sha256:00 actual=sha256:11
#5 ERROR: executor failed running [/bin/sh -c set -eu; ...]: exit code: 1
------
 > [2/4] RUN set -eu; p=/usr/lib/x.py; want=00; echo guard:
------
error: failed to solve: executor failed running [/bin/sh -c ...]: exit code: 1
""".splitlines()

ASSERT_CMD = "python3 /tmp/imagekit-assert.py /tmp/imagekit-assert.json"
ASSERT_RUN = (
    "RUN --mount=type=bind,source=imagekit-assert.py,target=/tmp/imagekit-assert.py "
    f"--mount=type=bind,source=imagekit-assert.json,target=/tmp/imagekit-assert.json {ASSERT_CMD}"
)
ASSERT_LOG = f"""\
#4 [1/3] FROM 127.0.0.1:5000/base@sha256:ab
#4 DONE 0.0s
#7 [3/3] {ASSERT_RUN}
#7 0.90 No broken requirements found.
#7 0.91 IMAGEKIT_ASSERT_PASS pip_check: exit 0
#7 0.92 IMAGEKIT_ASSERT_FAIL find_spec numpy: find_spec returned None
#7 0.93 IMAGEKIT_ASSERTIONS_REJECTED 1 failed: find_spec numpy
#7 ERROR: executor failed running [/bin/sh -c {ASSERT_CMD}]: exit code: 1
""".splitlines()


def test_drift_names_path_expected_and_actual() -> None:
    failure = analyse_failure(DRIFT_LOG)
    assert failure.reason == "overlay-drift"
    assert failure.message == (
        "overlay guard refused: path=/usr/lib/x.py expected=sha256:00 actual=sha256:11"
    )
    assert failure.step is not None and failure.step.startswith("[2/4] RUN p=/usr/lib/x.py; echo")
    assert failure.last_lines[-1].startswith("ERROR: executor failed")


def test_assertion_failure_lists_the_failed_checks_only() -> None:
    failure = analyse_failure(ASSERT_LOG)
    assert failure.reason == "assertion-failed"
    assert failure.message == (
        "assertions rejected the build: find_spec numpy: find_spec returned None"
    )
    # The step as the log names it, cut at 160 characters as every long step is.
    assert failure.step == f"[3/3] {ASSERT_RUN}"[:157] + "..."
    assert "IMAGEKIT_ASSERT_PASS pip_check: exit 0" in failure.last_lines


def test_plain_step_failure_and_no_step_at_all() -> None:
    lines = [
        "#6 [2/2] RUN false",
        "#6 0.1 oops",
        "#6 ERROR: executor failed running [/bin/sh -c false]: exit code: 1",
    ]
    failure = analyse_failure(lines)
    assert failure.reason == "step-failed" and failure.step == "[2/2] RUN false"
    assert failure.last_lines == [
        "oops",
        "ERROR: executor failed running [/bin/sh -c false]: exit code: 1",
    ]
    nothing = analyse_failure(["error: failed to dial gRPC: cannot connect", ""])
    assert nothing.reason == "build-failed" and nothing.step is None
    assert nothing.last_lines == ["error: failed to dial gRPC: cannot connect"]


def test_push_takes_a_repository_only() -> None:
    assert check_push_repo("127.0.0.1:5000/team/img").repository == "team/img"
    with pytest.raises(UsageError, match="without tag"):
        check_push_repo("127.0.0.1:5000/team/img:v1")
    with pytest.raises(ReferenceFormatError):
        check_push_repo("127.0.0.1:5000/Team/Img")


def test_a_destination_a_link_carries_into_a_kernel_mount_is_destination_blocked() -> None:
    lines = [
        line.replace(
            "IMAGEKIT_OVERLAY_DRIFT path=/usr/lib/x.py expected=sha256:00 actual=sha256:11",
            "IMAGEKIT_OVERLAY_BLOCKED path=/usr/local/bin/new.sh resolves=/proc/7/new.sh",
        )
        for line in DRIFT_LOG
    ]
    failure = analyse_failure(lines)
    assert failure.reason == "destination-blocked"
    assert failure.message == (
        "destination refused: path=/usr/local/bin/new.sh resolves=/proc/7/new.sh, under a "
        "folder or onto a file the runtime mounts over in every container"
    )

"""What each platform of such a build must prove before the index is accepted: that it runs
here (natively or under qemu-user), that the daemon's workers run it, and that the plan's
assertions hold in its pushed image; a platform never passes unchecked.

Apart from the flow (platforms.py), which calls these before and after the build.
"""

from __future__ import annotations

from collections.abc import Callable

from imagekit.builders.assemble.check import (
    RUN_WHERE_HINT,
    assertions_failed,
    not_run,
    rejection,
    run_assertions,
)
from imagekit.builders.platforms_index import Children, PlatformImage
from imagekit.builders.platforms_run import PlatformsRun, platform_tag
from imagekit.builders.record import assertion_details
from imagekit.errors import CouldNotFinish, ReferenceFormatError
from imagekit.ledger import RejectedBuildDetails
from imagekit.plans.model import LoadedPlan, same_platform_key
from imagekit.refs import Platform, parse_platform, parse_reference
from imagekit.runtime.engine import Engine, connect, execution_for


def daemon_platforms(workers: str) -> list[Platform]:
    """The platforms ``buildctl debug workers`` lists (its PLATFORMS column, comma-separated)."""
    found: list[Platform] = []
    for line in workers.splitlines()[1:]:
        for field in line.split()[1:]:
            for text in field.split(","):
                try:
                    found.append(parse_platform(text))
                except ReferenceFormatError:
                    continue
    return found


def daemon_runs_each(loaded: LoadedPlan, workers: str, where: str) -> None:
    """Exit 3 before anything is staged when the daemon's workers cannot run a platform."""
    offered = daemon_platforms(workers)
    keys = {same_platform_key(p) for p in offered}
    for platform in loaded.platforms:
        if same_platform_key(platform) not in keys:
            listed = ", ".join(sorted({str(p) for p in offered})) or "none"
            raise CouldNotFinish(
                f"{where} cannot build {platform}: its workers run {listed}",
                hint="register qemu-user's binfmt handler on the daemon's host, or use a "
                "builder with a native worker for it",
            )


def runs_here(run: PlatformsRun) -> None:
    """NOT RUN (exit 3) for a platform this host can run neither natively nor emulated.

    The engine runs the Dockerfile's RUN steps (overlay guards, pip, assertions) here; a
    daemon runs them where it is, but the assertions run once more here in the pushed image.
    Either way such a platform could not be proved, so nothing is built; the refusal is
    recorded, naming the platform.
    """
    for platform in run.loaded.platforms:
        execution = execution_for(platform)
        run.say(f"{platform}: {execution.note}")
        if execution.runs:
            continue
        refused = not_run(f"{platform} runs here neither natively nor under qemu-user: "
                          f"{execution.reason}", execution)  # fmt: skip
        run.say(refused.scope)
        run.reject(
            RejectedBuildDetails(
                reason="assertions-not-run",
                step=None,
                message=f"{refused.scope}; nothing was built",
                assertions=assertion_details(run.workspace, refused),
                platform=str(platform),
            ),
            image=str(run.repo),
        )
        raise CouldNotFinish(
            f"build of {run.loaded.name}: {platform}: {refused.scope}; nothing was built",
            hint="install qemu-user-static and binfmt-support (its handler needs the F flag), "
            "or build on a host of that architecture",
        )


def assert_each(
    run: PlatformsRun, children: Children, engine: Engine | None
) -> tuple[PlatformImage, ...]:
    """The plan's assertions in each platform's pushed image; a failure rejects the build."""
    images: list[PlatformImage] = []
    for child in children.entries:
        pushed = f"{run.repo}@{child.digest}"
        assertions = run_assertions(
            run.loaded,
            parse_reference(pushed),
            child.platform,
            run.run_dir / f"assertions-{platform_tag(child.platform)}",
            engine=engine,
            connect=connect,
            log=_prefixed(run, child.platform),
        )
        run.say(f"{child.platform}: assertions {assertions.status}: {assertions.scope}")
        images.append(
            PlatformImage(
                str(child.platform),
                child.digest,
                child.media_type,
                child.size,
                child.config,
                pushed,
                assertions,
            )  # fmt: skip
        )
    for image in images:
        _reject_unless_proved(run, image)
    return tuple(images)


def _prefixed(run: PlatformsRun, platform: Platform) -> Callable[[str], None]:
    """The assertion runner's lines in the build log, each naming its platform."""

    def log(text: str) -> None:
        run.tee.write(f"{platform}: {text}\n")

    return log


def _reject_unless_proved(run: PlatformsRun, image: PlatformImage) -> None:
    assertions = image.assertions
    refused = rejection(assertions)
    if refused is None:
        return
    reason, message = refused
    run.reject(
        RejectedBuildDetails(
            reason=reason,
            step="assertions",
            message=f"{image.platform}: {message}",
            manifest_digest=image.manifest_digest,
            assertions=assertion_details(run.workspace, assertions),
            platform=image.platform,
        ),
        image=image.pushed,
    )
    if assertions.status == "failed":
        raise assertions_failed(
            f"build of {run.loaded.name} rejected on {image.platform}: {message}",
            assertions,
            log=run.log_path,
            hint="the index and each platform's image stay in the registry by digest, untagged",
        )
    raise CouldNotFinish(
        f"build of {run.loaded.name}: {image.platform}: {message}", hint=RUN_WHERE_HINT
    )

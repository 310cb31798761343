"""The Job `imagekit gpu-preflight --emit-job` prints, read by a cluster's admission engine.

`kubectl apply --dry-run=client` needs an API server to map kinds (seen here: it asks
http://localhost:8080 for the API list before anything), so the cluster-side reader is
Kyverno's CLI, which setup builds and which runs the same engine as its admission controller,
offline: a ClusterPolicy validating the Job (its pod runs the image by digest, its pull in an
init container, asks for the node's GPUs and for CPU and memory as requests and limits, sets
no preemptionPolicy of its own; the Job is deleted after a while and its deadline leaves
room for the pull) is applied to the List's Job, and a Job
edited to break each rule is refused by name.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import yaml
from click.testing import CliRunner

from imagekit.cli import main
from tests.support.admission import offline_env, report_results
from tests.support.gotools import tool

REF = "registry.example.com/team/m3@sha256:" + "a" * 64
POLICY: dict[str, Any] = {
    "apiVersion": "kyverno.io/v1",
    "kind": "ClusterPolicy",
    "metadata": {"name": "gpu-preflight-job"},
    "spec": {
        "rules": [
            {
                "name": "runs-the-image-by-digest-on-the-gpus-asked",
                "match": {"any": [{"resources": {"kinds": ["Job"]}}]},
                "validate": {
                    "failureAction": "Enforce",
                    "message": "the preflight pod runs its image by digest with nvidia.com/gpu",
                    "pattern": {
                        "spec": {
                            "backoffLimit": 0,
                            "ttlSecondsAfterFinished": ">0",
                            "activeDeadlineSeconds": ">600",
                            "template": {
                                "spec": {
                                    "restartPolicy": "Never",
                                    "X(preemptionPolicy)": "null",
                                    "initContainers": [{"image": "*@sha256:*"}],
                                    "containers": [
                                        {
                                            "image": "*@sha256:*",
                                            "resources": {
                                                "limits": {
                                                    "nvidia.com/gpu": "?*",
                                                    "cpu": "?*",
                                                    "memory": "?*",
                                                },
                                                "requests": {"cpu": "?*", "memory": "?*"},
                                            },
                                        }
                                    ],
                                }
                            },
                        }
                    },
                },
            }
        ]
    },
}


def _apply(job: dict[str, Any], workdir: Path) -> tuple[int, tuple[tuple[str, str], ...], str]:
    workdir.mkdir(parents=True, exist_ok=True)
    (workdir / "policy.yaml").write_text(yaml.safe_dump(POLICY, sort_keys=False))
    (workdir / "job.json").write_text(json.dumps(job))
    done = subprocess.run(
        [tool("kyverno"), "apply", str(workdir / "policy.yaml"), "--resource",
         str(workdir / "job.json"), "--policy-report", "--output-format", "json",
         "--remove-color"],
        capture_output=True, text=True, timeout=120, env=offline_env(workdir), check=False,
    )  # fmt: skip
    return done.returncode, report_results(done.stdout), done.stdout + done.stderr


def test_the_emitted_job_passes_kyverno_and_each_broken_rule_is_refused(tmp_path: Path) -> None:
    emitted = CliRunner().invoke(
        main, ["gpu-preflight", REF, "--emit-job", "--gpus", "8", "--json",
               "--priority-class", "preflight-never-preempt"],
    )  # fmt: skip
    assert emitted.exit_code == 0, emitted.output
    job = json.loads(emitted.stdout)["items"][1]
    code, results, output = _apply(job, tmp_path / "as-emitted")
    assert code == 0 and results and {r for r, _ in results} == {"pass"}, output

    tagged = json.loads(json.dumps(job))
    tagged["spec"]["template"]["spec"]["containers"][0]["image"] = "registry.example.com/m3:1"
    preempting = json.loads(json.dumps(job))
    preempting["spec"]["template"]["spec"]["preemptionPolicy"] = "Never"
    no_gpus = json.loads(json.dumps(job))
    del no_gpus["spec"]["template"]["spec"]["containers"][0]["resources"]
    best_effort = json.loads(json.dumps(job))
    del best_effort["spec"]["template"]["spec"]["containers"][0]["resources"]["requests"]
    kept_forever = json.loads(json.dumps(job))
    del kept_forever["spec"]["ttlSecondsAfterFinished"]
    for name, broken in (
        ("tagged", tagged),
        ("preempting", preempting),
        ("no-gpus", no_gpus),
        ("best-effort", best_effort),
        ("kept-forever", kept_forever),
    ):
        code, results, output = _apply(broken, tmp_path / name)
        assert code != 0 and ("fail",) <= tuple(r for r, _ in results)[:1], (name, output)

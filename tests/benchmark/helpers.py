"""Test helpers: the official checker's own verdict, and a synthetic submission tree."""
from __future__ import annotations

import contextlib
import io
import json
import logging
from pathlib import Path

from mlperf_logging.compliance_checker import mlp_compliance

from benchmark.official import SYSTEM_FIELDS
from tests.benchmark.synthetic import RunSpec, write_run

SYSTEM = "1xSyntheticA100x8"
# Runs of the synthetic submission: the eval (1-based) at which each reaches the target.
CONVERGE_AT = (17, 18, 18, 19, 17, 18, 20, 18, 19, 17)

def official_verdict(path: str | Path, ruleset: str = "1.0.0") -> bool:
    """The compliance checker's verdict, called the way its own __main__ calls it.

    Independent of benchmark.official: a raise counts as a failure (the CLI would exit 1).
    """
    mlp_compliance.enqueued_configs.clear()
    root = logging.getLogger()
    sink = logging.NullHandler()
    root.addHandler(sink)
    try:
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
            checker = mlp_compliance.make_checker("training", ruleset, False, False)
            valid, *_ = mlp_compliance.main(str(path), f"training_{ruleset}/common.yaml", checker)
            return bool(valid)
    except Exception:  # noqa: BLE001 - the official CLI would die with a traceback: a failure
        return False
    finally:
        root.removeHandler(sink)
        mlp_compliance.enqueued_configs.clear()


def build_submission(root: Path, org: str = "ExampleOrg", division: str = "closed") -> Path:
    """Write <root>/<org>/results/<system>/bert/result_0..9.txt and systems/<system>.json."""
    org_dir = root / org
    bert = org_dir / "results" / SYSTEM / "bert"
    bert.mkdir(parents=True)
    for i, converge_at in enumerate(CONVERGE_AT):
        write_run(bert / f"result_{i}.txt",
                  RunSpec(seed=100 + i, converge_at=converge_at, division=division, org=org,
                          platform=SYSTEM, samples_per_second=880.0 + 7 * i))
    desc = {name: "" for name in SYSTEM_FIELDS}
    desc.update(submitter=org, division=division, status="onprem", system_name=SYSTEM,
                number_of_nodes="1", accelerators_per_node="8",
                accelerator_model_name="Synthetic A100", framework="TensorFlow 2.20")
    (org_dir / "systems").mkdir()
    (org_dir / "systems" / f"{SYSTEM}.json").write_text(json.dumps(desc, indent=2) + "\n")
    return org_dir

"""The BERT rules on small edits of a valid log: cadence at step boundaries, the optional eval
at 0, the stop rule, the rule table itself."""
from __future__ import annotations

from benchmark import cadence, constants
from benchmark.log_view import build_view
from benchmark.mllog_parse import parse_text
from benchmark.rules import NOT_LOGGED, RULES, check_eval_cadence, run_rules
from tests.benchmark import gallery
from tests.benchmark.synthetic import HYPERPARAMETERS_3072, RunSpec, write_run

CLOSED = (gallery.LOGS / gallery.CLOSED).read_text()


def bert_rules(text: str, severity: str = "error") -> set[str]:
    view = build_view(parse_text(text, "log.txt"))
    return {p.rule for p in run_rules(view) if p.severity == severity}


def edited(edit) -> str:
    return "\n".join(edit(CLOSED.splitlines())) + "\n"


def test_valid_logs_break_no_rule():
    for name in gallery.VALID_SPECS:
        assert bert_rules((gallery.LOGS / name).read_text()) == set()


def test_rule_table_names_are_unique_and_described():
    names = [rule.name for rule in RULES]
    assert len(names) == len(set(names))
    assert all(rule.summary and rule.severity in ("error", "warning") for rule in RULES)


def test_step_boundary_cadence_is_accepted_for_every_reference_batch(tmp_path):
    for batch in (256, 448, 1536, 3072, 8192):
        hp = HYPERPARAMETERS_3072.__class__(**{**HYPERPARAMETERS_3072.__dict__,
                                               "global_batch_size": batch})
        path = tmp_path / f"run_{batch}.txt"
        write_run(path, RunSpec(hyperparameters=hp, step_boundary=True, converge_at=5))
        assert bert_rules(path.read_text()) == set(), batch


def test_eval_at_zero_samples_is_optional():
    def add_initial_eval(lines):
        i = gallery.find(lines, "block_start")
        evals = [gallery.record(lines[gallery.find(lines, key)])
                 for key in ("eval_start", "eval_stop", "eval_accuracy")]
        start_ms = gallery.record(lines[i])["time_ms"]
        for obj in evals:
            obj["metadata"]["epoch_num"] = 0
            obj["time_ms"] = start_ms
        evals[2]["value"] = constants.INITIAL_CHECKPOINT_MLM_ACCURACY
        return lines[:i] + [gallery.render(o) for o in evals] + lines[i:]
    assert bert_rules(edited(add_initial_eval)) == set()


def test_cadence_messages_name_the_missing_eval():
    view = build_view(parse_text(edited(gallery.drop_eval(3)), "log.txt"))
    (line, message), = check_eval_cadence(view)
    assert "no eval at 600,000" in message and "750,000" in message and "skipped" in message


def test_stopping_after_the_target_with_an_extra_eval_is_a_warning():
    text = edited(gallery.train_past_target(1))
    assert "bert/stop-at-target" in bert_rules(text, "warning")
    assert bert_rules(text) == set()


def test_open_division_has_no_target_rule():
    text = (gallery.LOGS / gallery.OPEN).read_text()
    lines = gallery.set_value("eval_accuracy", 0.70, -1)(text.splitlines())
    assert bert_rules("\n".join(lines)) == set()


def test_findings_beyond_the_cap_are_summarized_in_one_line():
    freq = cadence.eval_frequency(256)
    late = gallery.chain(*(gallery.eval_samples_to(n, (n + 1) * freq + 8 * 256) for n in range(10)))
    problems = run_rules(build_view(parse_text(edited(late), "l")))
    cadence_problems = [p for p in problems if p.rule == "bert/eval-cadence"]
    assert len(cadence_problems) == 5 and "6 more like the above" in cadence_problems[-1].message


def test_blocks_may_carry_nominal_sizes_while_evals_carry_step_boundaries():
    """Batch 3072 evaluates at 175,104 samples; blocks logged as 0+175,000, 175,000+175,000..."""
    freq = cadence.eval_frequency(3072)
    lines = (gallery.LOGS / gallery.OPEN).read_text().splitlines()
    out, block = [], 0
    for line in lines:
        obj = gallery.record(line)
        if obj is not None and obj["key"] in ("block_start", "block_stop"):
            obj["metadata"]["first_epoch_num"] = block * freq
            if obj["key"] == "block_start":
                obj["metadata"]["epoch_count"] = freq
            else:
                block += 1
            line = gallery.render(obj)
        out.append(line)
    assert bert_rules("\n".join(out)) == set()


def test_blocks_counted_in_steps_are_checked_for_tiling_only():
    lines, block, out = CLOSED.splitlines(), 0, []
    for line in lines:
        obj = gallery.record(line)
        if obj is not None and obj["key"] in ("block_start", "block_stop"):
            obj["metadata"]["first_epoch_num"] = block * 586
            if obj["key"] == "block_start":
                obj["metadata"]["epoch_count"] = 586
            else:
                block += 1
            line = gallery.render(obj)
        out.append(line)
    assert bert_rules("\n".join(out)) == set()
    gap = gallery.set_meta("block_start", "first_epoch_num", 3 * 586 + 1, 3)(out)
    assert bert_rules("\n".join(gap)) == set()
    assert bert_rules("\n".join(gap), "warning") == {"bert/blocks"}


def test_every_bert_ruleset_checks_with_its_own_epsilon_key():
    from benchmark.log_check import check_log
    from benchmark.official import available_rulesets
    from benchmark.rulesets import RULESETS
    assert available_rulesets() == list(RULESETS)
    path = str(gallery.LOGS / gallery.CLOSED)  # logs opt_epsilon, the 1.0.0-2.0.0 key
    for version, facts in RULESETS.items():
        report = check_log(path, version)
        assert not [p for p in report.problems if p.rule.startswith("internal/")], version
        renamed = facts.epsilon_key != "opt_epsilon"
        errors = {p.rule for p in report.problems if p.severity == "error"}
        assert ("official/opt_lamb_epsilon" in errors) == renamed, version
        ours = [p.message for p in check_log(path, version, official=False).problems
                if p.rule == "bert/hyperparameters"]
        assert ours == ([NOT_LOGGED + "opt_lamb_epsilon"] if renamed else []), version

"""Where an exported step's time goes, by part of the model (`python -m devtools.time_step
--profile N`).

A trace of the compiled step (jax.profiler) times each executed HLO op: a kernel on a GPU's
streams, a thunk of the CPU runtime on the host. The compiled module's text names the ops; each
instruction there keeps TensorFlow's op name (`metadata={op_name="..."}`), and a fusion holds
the instructions of the computation it calls. `PARTS` maps those op names, the model's own
name scopes (`reference.model`, `reference.losses`, `reference.lamb`, `reference.trainer`), to
parts of the model; an op whose own name says nothing takes the part most of the instructions
inside it name. Backward ops carry their forward op's scope, so each part counts both passes.
Needs only the standard library (the trace is read by the caller, through jax).
"""
from __future__ import annotations

import collections
import re
from dataclasses import dataclass, field

OTHER = "other"
MODEL_SCOPE = "bert_pretraining"  # reference.model.BertPretrainingModel's name
# (part, pattern searched in a normalised op name: call prefixes and `gradient_tape/` removed,
# and all up to the model's own scope). The first match wins; no match is OTHER.
PARTS = (
    ("gradient clipping", r"(^|/)(clip_by_global_norm|global_norm)/"),
    ("LAMB update", r"(^|/)optimizer_update/"),
    ("layer norms", r"/LayerNorm/|^bert/encoder/layer_\d+/add(_\d+)?$"),
    ("attention: Q, K, V projections",
     r"^bert/encoder/layer_\d+/(attention/self/(query|key|value)|heads_first)/"),
    ("attention: QK product", r"^bert/encoder/layer_\d+/qk_product/"),
    ("attention: mask and softmax",
     r"^bert/encoder/layer_\d+/mask_softmax/|^bert/attention_mask/"),
    ("attention: dropout", r"^bert/encoder/layer_\d+/attention/self/dropout/"),
    ("attention: PV product", r"^bert/encoder/layer_\d+/pv_product/"),
    ("attention: output projection", r"^bert/encoder/layer_\d+/attention/output/"),
    ("feed-forward and GELU", r"^bert/encoder/layer_\d+/(intermediate|output)/"),
    ("embeddings", r"^bert/embeddings/"),
    ("masked-LM head: vocabulary product", r"(^|/)masked_lm_loss/.*logits(_gradient)?/"),
    ("masked-LM head: loss", r"(^|/)masked_lm_loss/"),
    ("masked-LM head: transform", r"^cls/predictions/transform/"),
    ("masked-LM head: gather", r"^cls/predictions/"),
    ("next-sentence head", r"^(bert/(pooler|cls_rows)|cls/seq_relationship)/|"
                           r"(^|/)next_sentence_loss/"),
)
_PART_PATTERNS = tuple((part, re.compile(pattern)) for part, pattern in PARTS)
PART_NAMES = tuple(part for part, _ in PARTS) + (OTHER,)
# Ops whose time is that of the ops of the computations they call (profiled themselves).
CONTAINERS = frozenset({"while", "conditional", "call", "async-start", "async-done"})
# Instructions that run no code of their own.
NO_CODE = frozenset({"parameter", "constant", "get-tuple-element", "tuple", "bitcast",
                     "after-all", "add-dependency", "opt-barrier"}) | CONTAINERS

_CALL_PREFIX = re.compile(r"(^|/)((Stateful)?PartitionedCall(_\d+)?|gradient_tape)(?=/)")
_HEADER = re.compile(r"^(?:ENTRY\s+)?%?(?P<name>[^\s(]+)\s*\(.*->.*\{\s*$")
_INSTRUCTION = re.compile(r"^\s*(?:ROOT\s+)?%?(?P<name>[^\s=]+)\s*=\s*.*?\s"
                          r"(?P<opcode>[a-z][a-z0-9\-]*)\(")
_CALLED = re.compile(r"\b(?:calls|to_apply|body|condition|branch_computations|"
                     r"called_computations)=(\{[^}]*\}|%?[\w.\-]+)")
_OP_NAME = re.compile(r'op_name="((?:[^"\\]|\\.)*)"')


def part_of(op_name: str) -> str:
    """The model part (one of PART_NAMES) of a TensorFlow op name from HLO metadata, e.g.
    "StatefulPartitionedCall/gradient_tape/bert_pretraining/bert/encoder/layer_0/qk_product/
    MatMul/MatMul" -> "attention: QK product". Merged names ("a;b") are judged by their last
    piece, the full path; "" is OTHER."""
    name = _CALL_PREFIX.sub("", op_name.split(";")[-1]).lstrip("/")
    name = name.split(f"{MODEL_SCOPE}/")[-1]
    for part, pattern in _PART_PATTERNS:
        if pattern.search(name):
            return part
    return OTHER


@dataclass
class Instruction:
    """One instruction of an HLO module's text: its opcode, TensorFlow op name ("" when it
    has none) and the computations it calls."""
    opcode: str
    op_name: str
    calls: list[str] = field(default_factory=list)


class CompiledModule:
    """An HLO module in text form (`HloModule.to_string()` of a compiled executable), parsed:
    `instructions` {name: Instruction}, `computations` {name: its instruction names}, `parts`
    {name: model part} of each instruction that runs code of its own (a kernel, a fusion, a
    library call; not a parameter, a tuple or a loop): the part of its own op name, else the
    part most instructions inside it name, else that of the instruction calling its
    computation (XLA's expansions, such as the random bits of a dropout mask, name only the
    call), else OTHER."""

    def __init__(self, text: str):
        self.instructions: dict[str, Instruction] = {}
        self.computations: dict[str, list[str]] = {}
        self._home: dict[str, str] = {}  # instruction -> its computation
        self._callers: dict[str, list[str]] = collections.defaultdict(list)
        self._caller_part: dict[str, str] = {}
        current = home = None
        for line in text.splitlines():
            header = _HEADER.match(line)
            if header:
                home = header.group("name")
                current = self.computations.setdefault(home, [])
            elif line.startswith("}"):
                current = None
            elif current is not None and (match := _INSTRUCTION.match(line)):
                op_name = _OP_NAME.search(line)
                calls = [name.strip().lstrip("%") for found in _CALLED.findall(line)
                         for name in found.strip("{}").split(",") if name.strip()]
                name = match.group("name")
                self.instructions[name] = Instruction(
                    match.group("opcode"), op_name.group(1) if op_name else "", calls)
                current.append(name)
                self._home[name] = home
                for called in calls:
                    self._callers[called].append(name)
        self.parts = {name: self._part(name) for name, instruction in self.instructions.items()
                      if instruction.opcode not in NO_CODE}

    def _part(self, name: str) -> str:
        own = part_of(self.instructions[name].op_name)
        if own != OTHER:
            return own
        inner = self._inner_parts(name)
        return inner.most_common(1)[0][0] if inner else self._called_from(self._home[name])

    def _called_from(self, computation: str) -> str:
        """The first part, other than OTHER, of an instruction calling `computation` (its
        own op name's, or in turn that of a caller of its computation)."""
        pending, seen = [computation], set()
        while pending:
            current = pending.pop(0)
            if current in self._caller_part:
                return self._caller_part[current]
            seen.add(current)
            for caller in self._callers.get(current, ()):
                part = part_of(self.instructions[caller].op_name)
                if part != OTHER:
                    self._caller_part[computation] = part
                    return part
                if self._home[caller] not in seen:
                    pending.append(self._home[caller])
        self._caller_part[computation] = OTHER
        return OTHER

    def _inner_parts(self, name: str) -> collections.Counter:
        """How many instructions of each part (but OTHER) the computations that `name` calls
        hold, recursively."""
        counts: collections.Counter = collections.Counter()
        pending, seen = list(self.instructions[name].calls), set()
        while pending:
            computation = pending.pop()
            if computation in seen:
                continue
            seen.add(computation)
            for inner in self.computations.get(computation, ()):
                instruction = self.instructions[inner]
                part = part_of(instruction.op_name)
                if part != OTHER:
                    counts[part] += 1
                pending.extend(instruction.calls)
        return counts

    def kernels_per_part(self) -> dict[str, int]:
        """How many of the module's ops of their own (`parts`; those of the entry computation,
        loop bodies and branches, not those inside a fusion) each part has."""
        inside = {called for instruction in self.instructions.values()
                  if instruction.opcode not in CONTAINERS for called in instruction.calls}
        counts = collections.Counter(
            self.parts[name] for computation, members in self.computations.items()
            if computation not in inside for name in members if name in self.parts)
        return dict(counts)


def summarize(module: CompiledModule, op_ns: dict[str, int], op_calls: dict[str, int],
              unattributed_ns: int, steps: int, top: int) -> dict:
    """The profile of `steps` traced steps from each op's total time (ns) and calls and the
    time no op claims: per part (ms per step, share of the busy time, how many of its ops
    ran), the `top` ops by time, and how many of the module's kernels each part has."""
    busy = sum(op_ns.values()) + unattributed_ns
    per_part: collections.Counter = collections.Counter()
    ops_ran: collections.Counter = collections.Counter()
    for op, ns in op_ns.items():
        part = module.parts.get(op, OTHER)
        per_part[part] += ns
        ops_ran[part] += 1

    def ms(ns):
        return round(ns / steps / 1e6, 4)

    def op_name(op):
        return module.instructions[op].op_name if op in module.instructions else ""

    return {
        "steps": steps,
        "busy_ms_per_step": ms(busy),
        "unattributed_ms_per_step": ms(unattributed_ns),
        "parts": [{"part": part, "ms_per_step": ms(per_part[part]),
                   "share": round(per_part[part] / busy, 4) if busy else 0.0,
                   "ops": ops_ran[part]}
                  for part in sorted(PART_NAMES, key=lambda p: -per_part[p])],
        "top_ops": [{"op": op, "part": module.parts.get(op, OTHER), "ms_per_step": ms(ns),
                     "calls_per_step": round(op_calls.get(op, 0) / steps, 2),
                     "tf_op": op_name(op)}
                    for op, ns in sorted(op_ns.items(), key=lambda kv: -kv[1])[:top]],
        "kernels_per_part": module.kernels_per_part(),
    }


def format_profile(profile: dict, source: str) -> list[str]:
    """The profile as table lines: ms per step, share and ops run per part, then the top ops
    with their part and TensorFlow op name."""
    lines = [f"profile over {profile['steps']} step(s) ({source}): "
             f"{profile['busy_ms_per_step']:.3f} ms busy per step",
             f"{'part':<36} {'ms/step':>10} {'share':>7} {'ops':>5}"]
    lines += [f"{p['part']:<36} {p['ms_per_step']:>10.3f} {p['share']:>7.1%} {p['ops']:>5}"
              for p in profile["parts"]]
    if profile["unattributed_ms_per_step"]:
        lines.append(f"{'(no HLO op)':<36} {profile['unattributed_ms_per_step']:>10.3f}")
    lines.append(f"{'top ops':<36} {'ms/step':>10} {'calls':>7}  part / TensorFlow op")
    lines += [f"{o['op'][:36]:<36} {o['ms_per_step']:>10.3f} {o['calls_per_step']:>7g}  "
              f"{o['part']} / {o['tf_op'][-70:]}" for o in profile["top_ops"]]
    return lines

"""`make time-step`: time the trainer's update that `make export-step` wrote, through jaxlib's
XLA on the device jax finds (a GPU where its plugin is installed, else the CPU), without
TensorFlow.

    python -m devtools.time_step DIR [--steps=20] [--warmup=3] [--peak_tflops=TFLOPS]
        [--profile=N] [--profile_top=15] [--seed=0]

DIR holds step.hlo.pb.xz, step.json and batch.npz (`devtools.export_step`). The HLO module is
converted to StableHLO, compiled for jax's default device and run with the trainer's state fed
back: the module aliases each updated variable to its parameter, so a step's new values are the
next step's inputs and their buffers are donated. The weights start at random values of BERT's
initialisation scale (`--seed`), the other state at the values step.json gives; every step
trains on the export's batch (the official length mix, in packed rows when step.json says so).

Prints one JSON line on stdout: seconds per step (the median of `--steps` steps each waited
for, and `--steps` more run back to back), sequences and TFLOP per second (the matrix-product
FLOPs step.json counts), their share of `--peak_tflops`, the conversion and compile seconds,
memory (XLA's temporary buffers; the device's peak where it reports one), the losses of the first
and last step and whether every loss was finite, and the trainer's global step after them.
`--profile N` traces N more steps with jax.profiler and adds where the time goes by part of the
model (`devtools.step_profile`); its table goes to stderr. Progress goes to stderr too.

Imports only the standard library, numpy, jax and `benchmark`'s file helpers.
"""
from __future__ import annotations

import argparse
import glob
import json
import lzma
import os
import statistics
import sys
import tempfile
import time
import zipfile
from pathlib import Path

import numpy as np

from benchmark.errors import exit_on_user_error, printable
from benchmark.files import InputError, open_regular, read_regular
from devtools.step_profile import CONTAINERS, CompiledModule, format_profile, summarize

# The files of an export folder (devtools.export_step writes them).
STEP_JSON = "step.json"
STEP_HLO = "step.hlo.pb.xz"
BATCH_FILE = "batch.npz"
JSON_LIMIT = 64 << 20
HLO_LIMIT = 1 << 30  # compressed
HLO_EXPANDED_LIMIT = 4 << 30
# All parameters together (BERT-large's weights and LAMB moments: about 1e9).
MAX_ELEMENTS = 1 << 33
DTYPES = {"pred": "bool", "int8": "int8", "int16": "int16", "int32": "int32", "int64": "int64",
          "uint8": "uint8", "uint16": "uint16", "uint32": "uint32", "uint64": "uint64",
          "float16": "float16", "float32": "float32", "float64": "float64",
          "bfloat16": "bfloat16"}
ROLES = {"feature", "weight", "lamb_m", "lamb_v", "lamb_beta_1_power", "lamb_beta_2_power",
         "counter", "dropout_seed", "loss_scale"}
GLOBAL_STEP = "global_step"


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("dir", help="folder with step.hlo.pb.xz, step.json, batch.npz")
    parser.add_argument("--steps", type=int, default=20, help="steps timed (each way)")
    parser.add_argument("--warmup", type=int, default=3, help="steps run first, untimed")
    parser.add_argument("--peak_tflops", type=float, default=None,
                        help="the device's dense peak, for the share of it reached "
                             "(989: an H100 or H200 SXM in bf16)")
    parser.add_argument("--profile", type=int, default=0, metavar="N",
                        help="trace N more steps and report the time by part of the model")
    parser.add_argument("--profile_top", type=int, default=15, help="ops listed by --profile")
    parser.add_argument("--seed", type=int, default=0, help="seed of the initial weights")
    args = parser.parse_args(argv)
    for flag in ("steps", "profile", "warmup", "profile_top"):
        if getattr(args, flag) < (1 if flag == "steps" else 0):
            parser.error(f"--{flag} must be at least {1 if flag == 'steps' else 0}")
    return args


def log(message: str) -> None:
    print(f"[time_step {time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


# ---------------------------------------------------------------------- the export's files
def _require(condition: bool, path: Path, problem: str) -> None:
    if not condition:
        raise InputError(f"{path}: {problem}")


def _is_int(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def check_manifest(meta, path: Path) -> None:
    """InputError (naming `path` and the field) unless `meta`, a parsed step.json, has what the
    timer reads: the shapes, element types and roles of the parameters, outputs that are
    results or new values of a parameter, and the step's size."""
    _require(isinstance(meta, dict), path, "is not a JSON object")
    for key, kind in (("params", list), ("outputs", list), ("bert_config", dict),
                      ("packed", bool), ("precision", str), ("seq_length", int),
                      ("rows_per_step", int), ("flops_per_step", (int, float))):
        _require(isinstance(meta.get(key), kind), path, f'"{key}" is missing or not a '
                 f"{kind.__name__ if isinstance(kind, type) else 'number'}")
    params, total = meta["params"], 0
    _require(bool(params), path, '"params" is empty')
    for index, param in enumerate(params):
        where = f'"params"[{index}]'
        _require(isinstance(param, dict) and param.get("index") == index, path,
                 f"{where} is not an object with index {index}")
        shape = param.get("shape")
        _require(isinstance(shape, list) and all(_is_int(d) and d >= 0 for d in shape), path,
                 f"{where}: shape is not a list of sizes")
        _require(param.get("dtype") in DTYPES, path, f"{where}: unknown dtype")
        _require(param.get("role") in ROLES, path, f"{where}: unknown role")
        _require(isinstance(param.get("name"), str), path, f"{where}: no name")
        total += int(np.prod(shape, dtype=np.float64))
    _require(total <= MAX_ELEMENTS, path, f"its parameters hold {total:,} values, over the "
             f"limit of {MAX_ELEMENTS:,}")
    for index, output in enumerate(meta["outputs"]):
        role = output.get("role") if isinstance(output, dict) else None
        _require(role in ("result", "new_value") and output.get("index") == index, path,
                 f'"outputs"[{index}] is not a result or a new value with index {index}')
        if role == "new_value":
            target = output.get("updates_param")
            _require(_is_int(target) and 0 <= target < len(params), path,
                     f'"outputs"[{index}]: updates_param is not a parameter index')
    _require(bool(meta["outputs"]) and meta["outputs"][0]["role"] == "result", path,
             "the first output is not the losses")


def read_manifest(folder: Path) -> dict:
    """step.json of an export folder, checked (`check_manifest`)."""
    path = folder / STEP_JSON
    try:
        meta = json.loads(read_regular(path, JSON_LIMIT))
    except (OSError, UnicodeDecodeError) as err:
        raise InputError(f"{path}: cannot read ({getattr(err, 'strerror', None) or err})"
                         ) from err
    except json.JSONDecodeError as err:
        raise InputError(f"{path}: not valid JSON ({err.msg}, line {err.lineno})") from err
    except RecursionError as err:
        raise InputError(f"{path}: JSON nested too deeply") from err
    check_manifest(meta, path)
    return meta


def read_module(folder: Path) -> bytes:
    """The serialized HloModuleProto of step.hlo.pb.xz (at most HLO_EXPANDED_LIMIT bytes)."""
    path = folder / STEP_HLO
    try:
        packed = read_regular(path, HLO_LIMIT)
        decompressor = lzma.LZMADecompressor()
        module = decompressor.decompress(packed, max_length=HLO_EXPANDED_LIMIT)
    except OSError as err:
        raise InputError(f"{path}: cannot read ({err.strerror})") from err
    except lzma.LZMAError as err:
        raise InputError(f"{path}: not an xz file ({err})") from err
    _require(decompressor.eof, path, "truncated, or over "
             f"{HLO_EXPANDED_LIMIT >> 30} GiB uncompressed")
    return module


def numpy_dtype(name: str):
    """The numpy dtype of a step.json element type (bfloat16: ml_dtypes', which jax brings)."""
    if name == "bfloat16":
        import ml_dtypes
        return np.dtype(ml_dtypes.bfloat16)
    return np.dtype(DTYPES[name])


def read_batch(folder: Path, meta: dict) -> dict[str, np.ndarray]:
    """batch.npz's arrays, one for each feature parameter of step.json, of its shape and
    type (an entry may hold no more bytes than that)."""
    path = folder / BATCH_FILE
    features = {p["name"]: p for p in meta["params"] if p["role"] == "feature"}
    try:
        with open_regular(path, MAX_ELEMENTS) as handle, zipfile.ZipFile(handle) as archive:
            sizes = {info.filename: info.file_size for info in archive.infolist()}
            batch = {}
            for name, param in features.items():
                entry, dtype = f"{name}.npy", numpy_dtype(param["dtype"])
                _require(entry in sizes, path, f"no feature {printable(name)}")
                expected = int(np.prod(param["shape"])) * dtype.itemsize
                _require(sizes[entry] <= expected + 4096, path,
                         f"{printable(name)} is larger than step.json's shape")
                with archive.open(entry) as member:
                    array = np.lib.format.read_array(member, allow_pickle=False)
                _require(list(array.shape) == param["shape"] and array.dtype == dtype, path,
                         f"{printable(name)} is {array.dtype}{list(array.shape)}, step.json "
                         f"says {param['dtype']}{param['shape']}")
                batch[name] = array
    except InputError:
        raise
    except OSError as err:
        raise InputError(f"{path}: cannot read ({err.strerror or err})") from err
    except (zipfile.BadZipFile, ValueError) as err:
        raise InputError(f"{path}: not a batch archive ({printable(str(err))[:200]})") from err
    return batch


# ---------------------------------------------------------------------- the step's inputs
def truncated_normal(rng: np.random.Generator, shape, stddev: float) -> np.ndarray:
    """float32 normal values of `stddev`, redrawn until within two standard deviations (TF's
    truncated_normal initializer)."""
    values = rng.standard_normal(shape, dtype=np.float32)
    outside = np.abs(values) > 2.0
    while outside.any():
        values[outside] = rng.standard_normal(int(outside.sum()), dtype=np.float32)
        outside = np.abs(values) > 2.0
    return values * np.float32(stddev)


def initial_value(param: dict, rng: np.random.Generator, path: Path) -> np.ndarray:
    """A state parameter's starting value from its step.json entry: "init" truncated_normal
    (with "stddev"), ones, zeros or constant (with "value")."""
    shape, dtype, init = param["shape"], numpy_dtype(param["dtype"]), param.get("init")
    if init == "truncated_normal" and isinstance(param.get("stddev"), (int, float)):
        return truncated_normal(rng, shape, param["stddev"]).astype(dtype)
    if init in ("ones", "zeros"):
        return (np.ones if init == "ones" else np.zeros)(shape, dtype)
    if init == "constant" and isinstance(param.get("value"), (int, float)):
        return np.full(shape, param["value"], dtype)
    raise InputError(f"{path}: parameter {param['index']} ({printable(param['name'])}) has no "
                     "initialisation the timer knows")


def step_inputs(meta: dict, batch: dict, seed: int, folder: Path) -> list[np.ndarray]:
    """Every HLO parameter's first value, in parameter order: the batch's features, then the
    trainer's state."""
    rng = np.random.default_rng(seed)
    return [batch[p["name"]] if p["role"] == "feature" else
            initial_value(p, rng, folder / STEP_JSON) for p in meta["params"]]


def sequences_per_step(meta: dict, batch: dict) -> float:
    """Sequences one update trains on: the packed rows' sequences (next_sentence_weights), or
    one a row."""
    if meta["packed"] and "next_sentence_weights" in batch:
        return float(np.count_nonzero(batch["next_sentence_weights"]))
    return float(batch["input_ids"].size // meta["seq_length"])


# ---------------------------------------------------------------------- jaxlib
def import_jax():
    """jax (64-bit types on: the step's counters are int64) and its xla_client."""
    import jax
    jax.config.update("jax_enable_x64", True)
    from jax._src.lib import xla_client
    return jax, xla_client


def to_stablehlo(xc, module: bytes, folder: Path):
    """StableHLO for a serialized HloModuleProto (jaxlib's converter: `hlo_to_stablehlo`, or
    through an XlaComputation where that is missing); InputError if jaxlib cannot read it."""
    mlir = getattr(getattr(xc, "_xla", None), "mlir", None)
    try:
        if hasattr(mlir, "hlo_to_stablehlo"):
            return mlir.hlo_to_stablehlo(module)
        return mlir.xla_computation_to_mlir_module(xc.XlaComputation(module))
    except Exception as err:  # jaxlib raises its own error types  # noqa: BLE001
        raise InputError(f"{folder / STEP_HLO}: not an HLO module jaxlib reads "
                         f"({printable(str(err).splitlines()[0] if str(err) else err)[:200]})"
                         ) from err


def check_parameters(xc, module: bytes, meta: dict, folder: Path) -> None:
    """InputError unless the module's parameters have step.json's shapes (a jaxlib without
    XlaComputation skips the check; running the step then fails instead)."""
    if not hasattr(xc, "XlaComputation"):
        return
    shapes = xc.XlaComputation(module).program_shape().parameter_shapes()
    listed = [tuple(p["shape"]) for p in meta["params"]]
    found = [tuple(s.dimensions()) for s in shapes]
    _require(found == listed, folder / STEP_JSON,
             f"lists {len(listed)} parameters that are not the module's {len(found)}"
             if len(found) != len(listed) else "a parameter's shape is not the module's")


def compile_step(xc, mlir, device):
    """A loaded executable for one device; the spellings of recent jaxlibs tried in turn."""
    options = xc.CompileOptions()
    client = device.client
    attempts = []
    if hasattr(xc, "DeviceList") and hasattr(client, "compile_and_load"):
        attempts.append(lambda: client.compile_and_load(mlir, xc.DeviceList((device,)),
                                                        options))
    if hasattr(client, "compile_and_load"):
        attempts.append(lambda: client.compile_and_load(mlir, [device], options))
    attempts.append(lambda: client.compile(mlir, options))
    errors = []
    for attempt in attempts:
        try:
            return attempt()
        except (TypeError, AttributeError) as err:  # another jaxlib's signature
            errors.append(f"{type(err).__name__}: {err}")
    raise RuntimeError("no compile call of this jaxlib took the module: " + "; ".join(errors))


def executable_text(exe) -> str:
    """The compiled module's text (with each instruction's op name)."""
    modules = exe.hlo_modules() if hasattr(exe, "hlo_modules") else exe.get_hlo_modules()
    return modules[0].to_string()


def run_once(exe, arrays: list) -> list:
    """One execution on single-device arrays; its outputs."""
    results = exe.execute_sharded(arrays)
    return [shards[0] for shards in results.disassemble_into_single_device_arrays()]


def memory_report(exe, device) -> dict:
    """XLA's temporary buffers for the step and the device's peak use, in GiB (None where the
    runtime does not say)."""
    report = {"compiled_temp_gib": None, "device_peak_gib": None}
    stats = exe.get_compiled_memory_stats() if hasattr(exe, "get_compiled_memory_stats") \
        else None
    if stats is not None:
        report["compiled_temp_gib"] = round(stats.temp_size_in_bytes / 2 ** 30, 4)
    device_stats = device.memory_stats() if hasattr(device, "memory_stats") else None
    if device_stats and "peak_bytes_in_use" in device_stats:
        report["device_peak_gib"] = round(device_stats["peak_bytes_in_use"] / 2 ** 30, 3)
    return report


# ---------------------------------------------------------------------- running
class Stepper:
    """Runs the executable with the state fed back: after each step, each aliased output
    becomes its parameter's next value (the old buffer was donated to it). `losses` keeps
    each step's losses output (device arrays)."""

    def __init__(self, exe, meta: dict, arrays: list):
        self.exe, self.state, self.losses = exe, arrays, []
        self.aliases = [(o["index"], o["updates_param"]) for o in meta["outputs"]
                        if o["role"] == "new_value"]

    def step(self) -> list:
        outputs = run_once(self.exe, self.state)
        for index, param in self.aliases:
            self.state[param] = outputs[index]
        self.losses.append(outputs[0])
        return outputs

    def wait(self, outputs: list) -> None:
        """Until every output of a step is computed."""
        for output in outputs:
            output.block_until_ready()


def time_steps(stepper: Stepper, warmup: int, steps: int) -> dict:
    """Warm-up steps, `steps` steps each waited for, then `steps` back to back (waited for at
    the end): seconds per step, median and back to back."""
    for _ in range(warmup):
        stepper.wait(stepper.step())
    times = []
    for _ in range(steps):
        started = time.perf_counter()
        stepper.wait(stepper.step())
        times.append(time.perf_counter() - started)
    started = time.perf_counter()
    for _ in range(steps):
        outputs = stepper.step()
    stepper.wait(outputs)
    return {"sec_per_step_median": round(statistics.median(times), 6),
            "sec_per_step_back_to_back": round((time.perf_counter() - started) / steps, 6)}


def trace(jax, stepper: Stepper, steps: int, cpu: bool) -> "object":
    """`steps` steps traced by jax.profiler; the trace as a jax.profiler.ProfileData. On the
    CPU the host tracer runs at its most detailed level, where the runtime's thunks show."""
    profile_data = getattr(jax.profiler, "ProfileData", None)
    if profile_data is None:
        raise InputError("--profile: this jax has no jax.profiler.ProfileData "
                         f"(jax {jax.__version__}; 0.7.1 or later has)")
    options = None
    if cpu and hasattr(jax.profiler, "ProfileOptions"):
        options = jax.profiler.ProfileOptions()
        options.host_tracer_level = 3
    with tempfile.TemporaryDirectory(prefix="time_step_trace_") as folder:
        kwargs = {"profiler_options": options} if options is not None else {}
        jax.profiler.start_trace(folder, **kwargs)
        try:
            for _ in range(steps):
                outputs = stepper.step()
            stepper.wait(outputs)
        finally:
            jax.profiler.stop_trace()
        files = glob.glob(os.path.join(folder, "**", "*.xplane.pb"), recursive=True)
        if not files:
            raise RuntimeError("jax.profiler wrote no trace")
        return profile_data.from_file(files[0])


def op_times(data, module: CompiledModule) -> tuple[dict, dict, int, str]:
    """({HLO op: ns}, {HLO op: calls}, ns of device work no op claims, where the times come
    from) in a trace of the step: the kernels on a GPU's streams, else the thunks on the
    host's threads. Loops and calls count through the ops they run."""
    planes = list(data.planes)
    devices = [p for p in planes if p.name.startswith("/device:")]
    source = "device streams" if devices else "host CPU thunks"
    op_ns: dict[str, int] = {}
    calls: dict[str, int] = {}
    unattributed = 0
    for plane in devices or [p for p in planes if p.name.startswith("/host:CPU")]:
        for line in plane.lines:
            if devices and "stream" not in line.name.lower():
                continue
            for event in line.events:
                stats = dict(event.stats)
                op = stats.get("hlo_op")
                if op is None:
                    unattributed += event.duration_ns if devices else 0
                    continue
                if op in module.instructions and module.instructions[op].opcode in CONTAINERS:
                    continue
                op_ns[op] = op_ns.get(op, 0) + int(event.duration_ns)
                calls[op] = calls.get(op, 0) + 1
    return op_ns, calls, int(unattributed), source


# ---------------------------------------------------------------------- main
def describe(meta: dict, batch: dict, folder: Path) -> dict:
    """The export's fields of the report."""
    config = meta["bert_config"]
    return {"export": printable(str(folder)), "precision": meta["precision"],
            "packed": meta["packed"],
            "bert": f"{config.get('num_hidden_layers')}x{config.get('hidden_size')}",
            "rows_per_step": meta["rows_per_step"], "seq_length": meta["seq_length"],
            "sequences_per_step": sequences_per_step(meta, batch),
            "flops_per_step": meta["flops_per_step"]}


def rates(report: dict, peak_tflops: float | None) -> dict:
    """Sequences and TFLOP per second at the median step time, and the share of the peak."""
    seconds = report["sec_per_step_median"]
    tflops = report["flops_per_step"] / seconds / 1e12
    return {"sequences_per_s": round(report["sequences_per_step"] / seconds, 3),
            "tflops": round(tflops, 4), "peak_tflops": peak_tflops,
            "peak_share": round(tflops / peak_tflops, 4) if peak_tflops else None}


def loss_report(stepper: Stepper, meta: dict, runs: int) -> dict:
    """The first and last step's [total, masked-LM, next-sentence] losses (None for one not
    finite), whether all were finite, the steps run and the trainer's global step after
    them."""
    losses = np.array([np.asarray(loss, np.float64) for loss in stepper.losses])
    names = [p["name"] for p in meta["params"]]
    step = int(np.asarray(stepper.state[names.index(GLOBAL_STEP)])) \
        if GLOBAL_STEP in names else None

    def values(row):
        return [float(x) if np.isfinite(x) else None for x in row]

    return {"loss_first": values(losses[0]), "loss_last": values(losses[-1]),
            "loss_finite": bool(np.isfinite(losses).all()), "steps_run": runs,
            "global_step": step}


def main(argv: list[str] | None = None) -> dict:
    """Time (and with --profile, profile) the export in the folder argv names; prints the
    report as one JSON line and returns it."""
    args = parse_args(argv)
    folder = Path(args.dir)
    if not folder.is_dir():
        raise InputError(f"{folder}: no such folder (make export-step writes one)")
    meta = read_manifest(folder)
    batch = read_batch(folder, meta)
    module = read_module(folder)
    jax, xc = import_jax()
    device = jax.devices()[0]
    report = {**describe(meta, batch, folder), "backend": jax.default_backend(),
              "device": getattr(device, "device_kind", str(device)), "jax": jax.__version__}
    started = time.perf_counter()
    mlir = to_stablehlo(xc, module, folder)
    check_parameters(xc, module, meta, folder)
    report["convert_s"] = round(time.perf_counter() - started, 3)
    log(f"compiling {len(module):,} bytes of HLO for {report['backend']} ({report['device']})")
    started = time.perf_counter()
    exe = compile_step(xc, mlir, device)
    report["compile_s"] = round(time.perf_counter() - started, 3)
    arrays = [jax.device_put(a, device) for a in step_inputs(meta, batch, args.seed, folder)]
    stepper = Stepper(exe, meta, arrays)
    log(f"compiled in {report['compile_s']:.1f} s; {args.warmup} warm-up and 2 x {args.steps} "
        "timed steps")
    report.update(time_steps(stepper, args.warmup, args.steps))
    report.update(rates(report, args.peak_tflops))
    if args.profile:
        compiled = CompiledModule(executable_text(exe))
        op_ns, calls, unattributed, source = op_times(
            trace(jax, stepper, args.profile, report["backend"] == "cpu"), compiled)
        report["profile"] = {"source": source, **summarize(
            compiled, op_ns, calls, unattributed, args.profile, args.profile_top)}
        for line in format_profile(report["profile"], source):
            print(line, file=sys.stderr)
    report.update(memory_report(exe, device))
    report.update(loss_report(stepper, meta, args.warmup + 2 * args.steps + args.profile))
    print(json.dumps(report), flush=True)
    return report


if __name__ == "__main__":
    exit_on_user_error(main)

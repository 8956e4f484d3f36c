"""The project's command lines run as real processes that start with TensorFlow imported.

`python -m reference.run_pretraining` spends 4 of a tiny run's 12 seconds (2 cores) importing
TensorFlow and the trainer, and 1.5 more tearing them down. `run` and `start` run a command
`python -m <a module of the project> ...` in a process forked from a server that imported them
once per test worker (multiprocessing's "forkserver"): its own pid, environment, working
folder, stdout and stderr, flags, locks and signal handlers, and its exit status as the
command's (SystemExit's code or string, -N when killed by signal N). What differs: the
interpreter is not started again, atexit hooks do not run, and TensorFlow was imported with
the server's environment (oneDNN off, as --deterministic, the default, asks;
TF_CPP_MIN_LOG_LEVEL=2); a command run otherwise (--nodeterministic, TF_ENABLE_ONEDNN_OPTS
other than 0, another log level for a command that may load TensorFlow) is started as a new
interpreter, and so are the data pipeline's commands run at another log level (they fork
worker pools, which costs more from the server's large address space than the imports
save). Tests about the interpreter's own start (the README's commands, `make`) use
subprocess.
"""
from __future__ import annotations

import inspect
import io
import locale
import multiprocessing
import multiprocessing.forkserver
import os
import resource
import runpy
import shutil
import signal
import subprocess
import sys
import tempfile
import warnings
from pathlib import Path

from absl import app

PACKAGES = ("benchmark.", "cleanup_scripts.", "devtools.", "reference.")  # their modules fork
# Imported by the server before it forks: what those modules import that is slow to import
# (the trainer's TensorFlow and tf-models-official, the checker's scipy and pandas, the storage
# commands' clients; not the modules run themselves: runpy would warn that they were imported
# before it ran them), then this module, whose import warms inspect's map of modules to files
# (see below).
PRELOAD = ["benchmark", "tensorflow", "reference.run_loop", "reference.preflight",
           "reference.placement", "reference.input_pipeline", "reference.checkpoint",
           "reference.trainer", "pandas", "tqdm", "requests", "google.cloud.storage",
           "mlperf_logging.rcp_checker.rcp_checker",
           "mlperf_logging.compliance_checker.mlp_compliance", __name__]
# Modules forked whatever TensorFlow's log level: the checker and the storage commands never
# load TensorFlow, and start no worker processes (the data pipeline's commands, which fork
# pools, take longer forked from the server's large address space than started anew).
ANY_LOG_LEVEL = ("benchmark.", "cleanup_scripts.artifacts.")
ONEDNN, LOG_LEVEL = "TF_ENABLE_ONEDNN_OPTS", "TF_CPP_MIN_LOG_LEVEL"
SERVER_LOG_LEVEL = "2"  # TensorFlow's native log level in the server (and so in its children)
_SERVER_ENVIRONMENT = {ONEDNN: "0", LOG_LEVEL: SERVER_LOG_LEVEL}

# mlperf_logging names the caller of each log line with inspect.getframeinfo, whose first call
# in a process maps every loaded module to its file (0.3 s of a tiny run with TensorFlow
# loaded); made at import, in the server it is made once for all the runs forked from it.
inspect.getmodule(inspect.currentframe())

_context = multiprocessing.get_context("forkserver")
_context.set_forkserver_preload(PRELOAD)


def _forkable(command: list[str], env: dict | None) -> bool:
    """Whether `command` is `python -m MODULE ...` for a module of PACKAGES, run with oneDNN
    off (its environment and flags leave --deterministic on) and, unless it is one of
    ANY_LOG_LEVEL, TensorFlow's native log level set to the server's (TensorFlow reads both
    once; a module that sets its own level when the environment has none, as the packer does,
    is started as a new interpreter)."""
    if len(command) < 3 or command[0] != sys.executable or command[1] != "-m" or \
            not command[2].startswith(PACKAGES):
        return False
    environment = env if env is not None else os.environ
    if environment.get(ONEDNN, "0") != "0":
        return False
    if environment.get(LOG_LEVEL) != _SERVER_ENVIRONMENT[LOG_LEVEL] and \
            not command[2].startswith(ANY_LOG_LEVEL):
        return False
    return not any(arg in ("--nodeterministic", "--deterministic=false",
                           "--deterministic=False") for arg in command[3:])


def _ensure_server() -> None:
    """Start the server (once per process) with oneDNN off, as TensorFlow reads it at import;
    this process's own environment is left as it was."""
    saved = {key: os.environ.get(key) for key in _SERVER_ENVIRONMENT}
    os.environ.update(_SERVER_ENVIRONMENT)
    try:
        multiprocessing.forkserver.ensure_running()
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def _child(module: str, args: list[str], env: dict, cwd: str | None, stdout: str,
           stderr: str, new_session: bool, file_size_limit: int | None) -> None:
    """In the forked process: the command's environment, folder, output files and limit,
    then the module as `python -m` runs it."""
    if new_session:
        os.setsid()
    if file_size_limit is not None:  # as `trap '' XFSZ; ulimit -f`: writes past it fail
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (file_size_limit, file_size_limit))
    sys.stdout.flush()
    sys.stderr.flush()
    for fd, path in ((1, stdout), (2, stderr)):
        opened = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        os.dup2(opened, fd)
        os.close(opened)
    os.environ.clear()
    os.environ.update(env)
    if cwd is not None:
        os.chdir(cwd)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    # TensorFlow's import queued a callback for absl's app.run (it lists the devices, which
    # starts TensorFlow's runtime); in `python -m` the trainer imports TensorFlow after app.run
    # started, where the callback runs at once, after the trainer diverted TensorFlow's native
    # messages. It only counts GPUs for tf.distribute's test combinations: dropped.
    app._init_callbacks.clear()  # pylint: disable=protected-access
    sys.argv = [module, *args]
    # A module the server imported (as a preloaded one's import) runs again as __main__, as
    # `python -m` runs one that its package's __init__ imports; runpy warns of it.
    warnings.filterwarnings("ignore", r".* found in sys\.modules after import of package",
                            RuntimeWarning)
    runpy.run_module(module, run_name="__main__", alter_sys=True)


def _text(path: Path) -> str:
    """A captured stream as subprocess's text mode reads it (universal newlines)."""
    return io.TextIOWrapper(io.BytesIO(path.read_bytes()),
                            encoding=locale.getpreferredencoding(False)).read()


class Started:
    """A forked command, with the part of subprocess.Popen's interface the tests use."""

    def __init__(self, command: list[str], env: dict | None, cwd: str | Path | None,
                 new_session: bool = False, file_size_limit: int | None = None) -> None:
        _ensure_server()
        self.args = command
        self._folder = Path(tempfile.mkdtemp(prefix="forked-"))
        self._out, self._err = self._folder / "stdout", self._folder / "stderr"
        self._process = _context.Process(
            target=_child, args=(command[2], command[3:], dict(env if env is not None
                                                                 else os.environ),
                                 None if cwd is None else str(cwd), str(self._out),
                                 str(self._err), new_session, file_size_limit))
        self._process.start()
        self.pid = self._process.pid

    def __del__(self) -> None:
        shutil.rmtree(self._folder, ignore_errors=True)

    @property
    def returncode(self) -> int | None:
        """The exit status (-N: killed by signal N), None while it runs."""
        return self._process.exitcode

    def poll(self) -> int | None:
        """The exit status, or None while it runs."""
        return self._process.exitcode

    def wait(self, timeout: float | None = None) -> int:
        """Wait for the exit status; subprocess.TimeoutExpired after `timeout` seconds."""
        self._process.join(timeout)
        if self._process.exitcode is None:
            raise subprocess.TimeoutExpired(self.args, timeout)
        return self._process.exitcode

    def send_signal(self, number: int) -> None:
        """Send signal `number` to the process, unless it has ended."""
        if self._process.exitcode is None:
            os.kill(self.pid, number)

    def kill(self) -> None:
        """SIGKILL, unless it has ended."""
        self.send_signal(signal.SIGKILL)

    def communicate(self, timeout: float | None = None) -> tuple[str, str]:
        """Wait for the exit, then (stdout, stderr) as text."""
        self.wait(timeout)
        try:
            return _text(self._out), _text(self._err)
        finally:
            shutil.rmtree(self._folder, ignore_errors=True)


def start(command: list[str], env: dict | None = None, cwd: str | Path | None = None,
          start_new_session: bool = False, file_size_limit: int | None = None):
    """subprocess.Popen(command, env=env, cwd=cwd, stdout=PIPE, stderr=PIPE, text=True)
    for what the tests do with it (poll, wait, send_signal, kill, communicate); forked as the
    module docstring says when `command` runs a module of PACKAGES with oneDNN off
    (`file_size_limit`: as `run` says)."""
    if _forkable(command, env):
        return Started(command, env, cwd, start_new_session, file_size_limit)
    return subprocess.Popen(command, env=env, cwd=cwd, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True,
                            start_new_session=start_new_session)


def run(command: list[str], env: dict | None = None, cwd: str | Path | None = None,
        timeout: float | None = None, file_size_limit: int | None = None
        ) -> subprocess.CompletedProcess:
    """subprocess.run(command, env=env, cwd=cwd, capture_output=True, text=True,
    timeout=timeout), forked as `start` says; past `timeout` seconds the process is killed and
    subprocess.TimeoutExpired raised, as subprocess.run does. `file_size_limit`: bytes no
    file of the process may grow past (RLIMIT_FSIZE, SIGXFSZ ignored: the write that crosses
    it fails with EFBIG, a full disk as an unprivileged test can have it)."""
    if file_size_limit is not None and not _forkable(command, env):
        raise ValueError(f"{command[:3]}: a file size limit needs a forkable command")
    process = start(command, env, cwd, file_size_limit=file_size_limit)
    try:
        stdout, stderr = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        process.kill()
        process.communicate()
        raise
    return subprocess.CompletedProcess(command, process.returncode, stdout, stderr)

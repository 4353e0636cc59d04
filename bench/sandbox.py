"""Benchmark: the overhead of one sandboxed no-op task against a plain ``docker run --rm``.

Not a test: timings live here, never in ``tests/``. Run from the repository root
(needs a Docker engine and ``grader-base:bookworm``)::

    .venv/bin/python bench/sandbox.py                 # 20 rounds after 2 warm-up rounds
    .venv/bin/python bench/sandbox.py --rounds 5      # a smoke run

It builds (once, idempotently, ``--network none``) ``grader-bench-noop:1``: the base
image as uid 10001 whose entrypoint is a ``/bin/sh`` + ``sed`` one-liner writing
``/output/run.jsonl`` with one line per query of ``/input/queries.jsonl`` and no
hits. Then, per round, in this order, each contender on a freshly staged ``/input``
(``grader.sandbox.staging.stage_task``, a handful of queries and documents):

  (a) the grader's path: ``stage_task`` + ``run_and_collect(image, staged,
      mode="retrieve", limits=SandboxLimits(...), log_path=...)``: capped ext4 images
      for ``/output`` and ``/tmp`` (as root), the container's watchdog process,
      create, start, wait (thread + timer), inspect, logs, remove, classify,
      validate the run, unmount;
  (b) ``stage_task`` + ``docker run --rm --network none -v IN:/input:ro -v
      OUT:/output grader-bench-noop:1`` (subprocess, a plain ``/output`` folder),
      then a line count of ``run.jsonl``;
  (c) as (b) with the sandbox's hardening flags (``--read-only --tmpfs /tmp
      --cap-drop ALL --security-opt no-new-privileges --pids-limit --memory
      --memory-swap --cpus --ulimit nofile --ulimit fsize --init``, the json-file
      log options, ``HOME=/tmp``), the same values as (a)'s limits: (c) - (b) is
      the cost of hardening, (a) - (c) that of the Python SDK path.

Every contender's timed span covers staging, the output folder (made and
removed), the container and reading its output; removing the staged input is
outside. After the timed rounds, ``--profile-rounds`` more runs of (a) with
timing wrappers around its steps show where (a)'s time goes.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import os
import platform
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from grader.data.task import Document, Query  # noqa: E402
from grader.sandbox.blinding import BlindingKey  # noqa: E402
from grader.sandbox.limits import SandboxLimits  # noqa: E402
from grader.sandbox.staging import StagedTask, stage_task  # noqa: E402

BASE_IMAGE = "grader-base:bookworm"
IMAGE = "grader-bench-noop:1"
# One run.jsonl line per query, no hits. The staged queries.jsonl is json.dumps
# output ({"_id": "...", "text": ...}); the bench's ids need no JSON escaping.
SCRIPT = r"""sed -n 's/^{"_id": "\([^"]*\)".*$/{"query_id": "\1", "hits": []}/p' /input/queries.jsonl > /output/run.jsonl"""
DOCKERFILE = f"""FROM {BASE_IMAGE}
USER 10001
ENTRYPOINT {json.dumps(["/bin/sh", "-c", SCRIPT])}
"""
IMAGE_LABEL = "dev.grader.bench-noop"
NESTED = "\u21b3 "
DEFAULT_ROUNDS = 20
DEFAULT_WARMUP = 2
TARGET_MEDIAN_S = 1.0
TARGET_RATIO = 1.5
# The sandbox's defaults, but a short timer: a no-op must not hang the bench.
LIMITS = SandboxLimits(time_limit_s=60.0)
CONTENDERS = {
    "a": "(a) grader: stage_task + run_and_collect",
    "b": "(b) docker run --rm --network none (bare)",
    "c": "(c) docker run --rm, sandbox hardening flags",
}


# --- the image --------------------------------------------------------------


def ensure_image() -> str:
    """Build ``IMAGE`` unless it exists with this Dockerfile (label holds its hash); return its id."""
    digest = hashlib.sha256(DOCKERFILE.encode()).hexdigest()[:16]
    probe = subprocess.run(
        ["docker", "image", "inspect", IMAGE, "--format", "{{json .Config.Labels}}|{{.Id}}"], capture_output=True, text=True, check=False
    )
    if probe.returncode == 0:
        labels, image_id = probe.stdout.strip().rsplit("|", 1)
        if (json.loads(labels) or {}).get(IMAGE_LABEL) == digest:
            return image_id
    if subprocess.run(["docker", "image", "inspect", BASE_IMAGE], capture_output=True, check=False).returncode != 0:
        sys.exit(f"{BASE_IMAGE} is missing (images/base/build.sh builds it)")
    dockerfile = DOCKERFILE + f'LABEL {IMAGE_LABEL}="{digest}"\n'
    with tempfile.TemporaryDirectory(prefix="grader-bench-ctx-") as context:
        Path(context, "Dockerfile").write_text(dockerfile, encoding="utf-8")
        built = subprocess.run(
            ["docker", "build", "--network", "none", "--quiet", "--tag", IMAGE, context],
            capture_output=True,
            text=True,
            check=False,
            env={**os.environ, "DOCKER_BUILDKIT": "0"},
        )
    if built.returncode != 0:
        sys.exit(f"building {IMAGE} failed:\n{built.stderr}")
    print(f"built {IMAGE}", flush=True)
    return subprocess.run(["docker", "image", "inspect", IMAGE, "--format", "{{.Id}}"], capture_output=True, text=True, check=True).stdout.strip()


# --- the contenders ---------------------------------------------------------


class Bench:
    """Fresh folders under ``workdir`` for each run; the contenders as methods returning seconds."""

    def __init__(self, workdir: Path, image_id: str, queries: int, documents: int) -> None:
        self.workdir = workdir
        self.image_id = image_id
        self.queries = [Query(f"q{i:03d}", f"what does function {i} return") for i in range(queries)]
        self.documents = [Document(f"d{i:03d}", f"def f{i}", f"def f{i}(): return {i}") for i in range(documents)]
        self.counter = 0
        # Staging blinds ids as grading does (docs/protocol.md); one key for the whole run, as one grade has.
        self.key = BlindingKey.generate()
        for sub in ("input", "scratch", "logs"):
            (workdir / sub).mkdir(parents=True, exist_ok=True)

    def _input_folder(self) -> Path:
        self.counter += 1
        return self.workdir / "input" / f"{os.getpid()}-{self.counter}"

    def _stage(self, folder: Path) -> StagedTask:
        return stage_task(folder, task="bench", split="test", mode="retrieve", top_k=10, queries=self.queries, documents=self.documents, key=self.key)

    def grader(self) -> float:
        from grader.grading.sandboxed import run_and_collect

        folder = self._input_folder()
        log_path = self.workdir / "logs" / f"{folder.name}.log"
        started = time.perf_counter()
        staged = self._stage(folder)
        output = run_and_collect(self.image_id, staged, mode="retrieve", limits=LIMITS, log_path=log_path, scratch=self.workdir / "scratch")
        elapsed = time.perf_counter() - started
        shutil.rmtree(folder)
        log_path.unlink(missing_ok=True)
        run = output.outputs.run
        assert run is not None and list(run.query_ids) == [q.id for q in self.queries], "(a) returned an unexpected run"
        assert output.outcome.exit_code == 0
        return elapsed

    def _docker_run(self, flags: list[str]) -> float:
        folder = self._input_folder()
        started = time.perf_counter()
        staged = self._stage(folder)
        out = Path(tempfile.mkdtemp(prefix="grader-bench-out-", dir=self.workdir / "scratch"))
        os.chmod(out, 0o777)
        result = subprocess.run(
            ["docker", "run", "--rm", "--network", "none", *flags, "-v", f"{staged.folder}:/input:ro", "-v", f"{out}:/output", self.image_id],
            capture_output=True,
            check=False,
        )
        lines = (out / "run.jsonl").read_bytes().count(b"\n") if result.returncode == 0 else -1
        shutil.rmtree(out)
        elapsed = time.perf_counter() - started
        shutil.rmtree(folder)
        if result.returncode != 0 or lines != len(self.queries):
            raise RuntimeError(f"docker run failed (exit {result.returncode}, {lines} lines): {result.stderr.decode(errors='replace')}")
        return elapsed

    def bare(self) -> float:
        return self._docker_run([])

    def hardened(self) -> float:
        return self._docker_run(hardening_flags(LIMITS))


def hardening_flags(limits: SandboxLimits) -> list[str]:
    """The CLI spelling of ``grader.sandbox.container.run_container``'s configuration."""
    flags = [
        "--read-only",
        "--tmpfs", f"/tmp:rw,nosuid,nodev,noexec,size={limits.tmp_bytes}",
        "--cap-drop", "ALL",
        "--security-opt", "no-new-privileges",
        "--pids-limit", str(limits.pids),
        "--memory", str(limits.memory_bytes),
        "--memory-swap", str(limits.memory_bytes),
        "--cpus", str(limits.cpus),
        "--ulimit", f"nofile={limits.nofile}:{limits.nofile}",
        "--ulimit", f"fsize={limits.output_bytes}:{limits.output_bytes}",
        "--init",
        "--log-driver", "json-file",
        "--log-opt", f"max-size={limits.log_bytes}",
        "--log-opt", "max-file=1",
        "--env", "HOME=/tmp",
        "--label", "dev.grader.sandbox=1",
    ]  # fmt: skip
    if limits.runtime:
        flags += ["--runtime", limits.runtime]
    return flags


# --- where (a)'s time goes --------------------------------------------------


class Phases:
    """Timing wrappers around the steps of (a); ``take()`` returns and resets one run's phases."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.current: dict[str, list[float]] = {}
        self.restore: list[tuple[Any, str, Any]] = []
        self.stack = threading.local()

    def add(self, label: str, seconds: float) -> None:
        with self.lock:
            entry = self.current.setdefault(label, [0.0, 0])
            entry[0] += seconds
            entry[1] += 1

    def wrap(self, owner: Any, name: str, label: str | Callable[..., str]) -> None:
        original = getattr(owner, name)

        def timed(*args: Any, **kwargs: Any) -> Any:
            name = label(*args, **kwargs) if callable(label) else label
            stack = self.stack.__dict__.setdefault("labels", [])
            # A call inside another timed call (the SDK inspects inside logs) is listed
            # under its caller, and not summed twice.
            shown = f"{NESTED}{name}, within {stack[-1].split(': ', 1)[-1]}" if stack else name
            stack.append(name)
            started = time.perf_counter()
            try:
                return original(*args, **kwargs)
            finally:
                stack.pop()
                self.add(shown, time.perf_counter() - started)

        self.restore.append((owner, name, original))
        setattr(owner, name, timed)

    def install(self) -> None:

        import docker.api.client
        import docker.models.containers

        import grader.collect.outputs as collect_module
        import grader.sandbox.container as container_module
        import grader.sandbox.output_dir as output_module
        import grader.sandbox.task_run as task_module

        api = docker.api.client.APIClient
        self.wrap(api, "create_container", "engine: create (POST /containers/create)")
        self.wrap(api, "inspect_container", "engine: inspect (GET /json)")
        self.wrap(api, "start", "engine: start (POST /start)")
        self.wrap(api, "wait", "engine: wait (POST /wait, in the waiter thread)")
        self.wrap(api, "logs", lambda *a, **k: f"engine: logs ({'stderr tail' if not k.get('stdout', True) else 'full log'})")
        self.wrap(api, "remove_container", "engine: remove (DELETE, force)")
        self.wrap(docker.models.containers.ContainerCollection, "create", "sdk: containers.create")
        self.wrap(docker.models.containers.Container, "reload", "sdk: container.reload")
        self.wrap(container_module, "atomic_write_bytes", "host: write the log file")
        import grader.sandbox.owner as owner_module
        import grader.sandbox.watchdog as watchdog_module

        # 0.2.0: /output and /tmp are loop-mounted ext4 images (as root) in an owned scratch folder, and each
        # container has a watchdog process; time those steps (mkfs, mount and umount through subprocess.run).
        self.wrap(output_module, "_mount_image", "host: mkfs.ext4 + loop mount (per image)")
        self.wrap(owner_module, "remove_owned_folder", "host: unmount + remove the scratch folder")
        self.wrap(watchdog_module, "spawn", "host: spawn the watchdog process")
        self.wrap(watchdog_module, "stop", "host: stop the watchdog process")
        self.wrap(task_module, "classify", "host: classify (statvfs)")
        self.wrap(collect_module, "read_run_output", "host: read + validate run.jsonl")

    def uninstall(self) -> None:
        for owner, name, original in reversed(self.restore):
            setattr(owner, name, original)
        self.restore.clear()

    def take(self) -> dict[str, list[float]]:
        with self.lock:
            taken, self.current = self.current, {}
        return taken


def profile(bench: Bench, rounds: int) -> tuple[list[tuple[str, float, int]], float]:
    """Mean seconds and (median) calls per step of (a), slowest first, and the mean total."""
    phases = Phases()
    per_run: list[dict[str, list[float]]] = []
    totals: list[float] = []
    phases.install()
    try:
        for _ in range(rounds):
            phases.take()
            started = time.perf_counter()
            stage_started = time.perf_counter()
            folder = bench._input_folder()
            staged = bench._stage(folder)
            phases.add("host: stage /input", time.perf_counter() - stage_started)
            from grader.grading.sandboxed import run_and_collect

            run_and_collect(
                bench.image_id,
                staged,
                mode="retrieve",
                limits=LIMITS,
                log_path=bench.workdir / "logs" / "profile.log",
                scratch=bench.workdir / "scratch",
            )
            totals.append(time.perf_counter() - started)
            per_run.append(phases.take())
            shutil.rmtree(folder)
    finally:
        phases.uninstall()
        (bench.workdir / "logs" / "profile.log").unlink(missing_ok=True)
    labels = {label for run in per_run for label in run}
    table = [
        (
            label,
            statistics.fmean(run.get(label, [0.0, 0])[0] for run in per_run),
            int(statistics.median(run.get(label, [0.0, 0])[1] for run in per_run)),
        )
        for label in labels
    ]
    # Slowest first, each nested call right after its caller.
    top = sorted((entry for entry in table if not entry[0].startswith(NESTED)), key=lambda entry: -entry[1])
    nested = [entry for entry in table if entry[0].startswith(NESTED)]
    table = []
    for entry in top:
        table.append(entry)
        table += sorted((n for n in nested if n[0].endswith(f"within {entry[0].split(': ', 1)[-1]}")), key=lambda n: -n[1])
    table += [n for n in nested if n not in table]
    return table, statistics.fmean(totals)


# --- statistics and report ----------------------------------------------------


def quantile(values: list[float], q: float) -> float:
    """Linear interpolation between closest ranks (numpy's default)."""
    ordered = sorted(values)
    position = (len(ordered) - 1) * q
    low = math.floor(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


def machine_facts() -> dict[str, str]:
    import docker

    cpu = "unknown"
    try:
        cpu = next(line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines() if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    memory = "unknown"
    try:
        kib = int(next(line for line in Path("/proc/meminfo").read_text().splitlines() if line.startswith("MemTotal")).split()[1])
        memory = f"{kib / 1024 / 1024:.1f} GiB"
    except (OSError, StopIteration, ValueError):
        pass
    info = (
        subprocess.run(
            [
                "docker",
                "info",
                "--format",
                "{{.ServerVersion}}|{{.Driver}}|{{.CgroupVersion}}|{{.CgroupDriver}}|{{.DefaultRuntime}}|{{.KernelVersion}}",
            ],
            capture_output=True,
            text=True,
            check=False,
        )
        .stdout.strip()
        .split("|")
    )
    info += ["unknown"] * (6 - len(info))
    client = subprocess.run(["docker", "version", "--format", "{{.Client.Version}}"], capture_output=True, text=True, check=False).stdout.strip()
    return {
        "nproc": str(len(os.sched_getaffinity(0))),
        "cpu": cpu,
        "memory": memory,
        "kernel": platform.release(),
        "docker engine": info[0],
        "docker CLI": client or "unknown",
        "storage driver": info[1],
        "cgroup": f"v{info[2]} ({info[3]})",
        "runtime": info[4],
        "docker SDK (Python)": docker.__version__,
        "python": platform.python_version(),
        "euid": f"{os.geteuid()} (root loop-mounts capped ext4 images on /output and /tmp)" if os.geteuid() == 0 else str(os.geteuid()),
    }


def _load() -> str:
    return ", ".join(f"{value:.2f}" for value in os.getloadavg())


def report(
    times: dict[str, list[float]],
    args: argparse.Namespace,
    command: str,
    facts: dict[str, str],
    loads: tuple[str, str],
    client_s: float,
    phase_table: list[tuple[str, float, int]],
    phase_total: float,
    wall_s: float,
) -> str:
    lines = [
        "# Sandbox overhead benchmark",
        "",
        f"One no-op retrieve task ({args.queries} queries, {args.documents} documents; the image `{IMAGE}` writes one `run.jsonl` line per query with no hits "
        f"through `/bin/sh -c 'sed ...'`), {args.rounds} rounds after {args.warmup} warm-up rounds, contenders interleaved "
        f"({', '.join(args.only)}, {', '.join(args.only)}, ...). Each timed span: stage a fresh `/input`, make the output folder, run the container, read its "
        "output, remove the output folder. (a) also validates the run, as the grader does; (b) and (c) count its lines.",
        "",
        f"Limits of (a) and (c): the sandbox defaults (`SandboxLimits()`: {LIMITS.memory_bytes >> 30} GiB memory = memory+swap, {LIMITS.cpus:g} CPUs, "
        f"{LIMITS.pids} pids, nofile {LIMITS.nofile}, fsize {LIMITS.output_bytes >> 30} GiB, /tmp {LIMITS.tmp_bytes >> 30} GiB) with a {LIMITS.time_limit_s:g} s timer.",
        "",
        "| contender | median (s) | p90 (s) | min (s) | max (s) |",
        "|---|---:|---:|---:|---:|",
    ]
    medians = {}
    for key in args.only:
        values = times[key]
        medians[key] = statistics.median(values)
        lines.append(f"| {CONTENDERS[key]} | {medians[key]:.3f} | {quantile(values, 0.9):.3f} | {min(values):.3f} | {max(values):.3f} |")
    lines += ["", "| comparison | value | target | met |", "|---|---:|---:|---|"]
    if "a" in medians:
        lines.append(f"| median(a) | {medians['a']:.3f} s | < {TARGET_MEDIAN_S:g} s | {'yes' if medians['a'] < TARGET_MEDIAN_S else 'no'} |")
    if "a" in medians and "b" in medians:
        ratio = medians["a"] / medians["b"]
        lines.append(f"| median(a) / median(b) | {ratio:.2f}x | < {TARGET_RATIO:g}x | {'yes' if ratio < TARGET_RATIO else 'no'} |")
        lines.append(f"| median(a) - median(b) | {medians['a'] - medians['b']:+.3f} s | | |")
    if "c" in medians and "b" in medians:
        lines.append(f"| median(c) - median(b): the hardening flags | {medians['c'] - medians['b']:+.3f} s | | |")
    if "a" in medians and "c" in medians:
        lines.append(f"| median(a) - median(c): SDK path, watchdog, /output and /tmp images, validation | {medians['a'] - medians['c']:+.3f} s | | |")
    if phase_table:
        lines += [
            "",
            f"## Where (a)'s time goes ({args.profile_rounds} more runs of (a), alone, with timing wrappers; mean total {phase_total:.3f} s)",
            "",
            "Means per step (so that they add up; a nested call is part of its caller's time). The main thread blocks on an event while the waiter thread's `wait` runs, so `wait` counts as main-thread time; it covers the container's run after `start` returned (init, sh, sed, exit, and the engine noticing). "
            f"The SDK client (`docker.from_env` + ping) is made once per process and cached: {client_s:.3f} s, paid in the warm-up.",
            "",
            "| step | calls | mean (s) | share |",
            "|---|---:|---:|---:|",
        ]
        for label, seconds, calls in phase_table:
            lines.append(f"| {label} | {calls} | {seconds:.4f} | {seconds / phase_total:.0%} |")
        rest = phase_total - sum(seconds for label, seconds, _ in phase_table if not label.startswith(NESTED))
        lines.append(f"| (rest: SDK models, thread start-up, event wake-up, Python) | | {rest:.4f} | {rest / phase_total:.0%} |")
    lines += ["", "## Machine", "", "| | |", "|---|---|"]
    lines += [f"| {key} | {value} |" for key, value in facts.items()]
    lines += [
        f"| load average (1, 5, 15 min) at start | {loads[0]} |",
        f"| load average (1, 5, 15 min) at end | {loads[1]} |",
        f"| bench wall time | {wall_s:.0f} s |",
        "",
        "The machine is shared: other jobs may run alongside, so compare contenders within one run, not across runs.",
        "",
        "## Command",
        "",
        "```sh",
        command,
        "```",
        "",
    ]
    return "\n".join(lines)


def _relative(path: str) -> str:
    absolute = Path(os.path.abspath(path))
    return str(absolute.relative_to(REPO)) if absolute.is_relative_to(REPO) else path


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    parser.add_argument("--rounds", type=int, default=DEFAULT_ROUNDS, help="timed rounds (each runs every contender once)")
    parser.add_argument("--warmup", type=int, default=DEFAULT_WARMUP, help="untimed rounds first")
    parser.add_argument("--queries", type=int, default=5, help="staged queries")
    parser.add_argument("--documents", type=int, default=8, help="staged documents")
    parser.add_argument("--only", default="abc", help="contenders, a subset of 'abc', run in this order each round")
    parser.add_argument("--profile-rounds", type=int, default=10, help="extra runs of (a) with timing wrappers around its steps (0: none)")
    parser.add_argument("--workdir", type=Path, default=REPO / "bench" / "out" / "sandbox", help="staged inputs, outputs and logs (git-ignored)")
    parser.add_argument(
        "--markdown",
        type=Path,
        default=None,
        help="write the report here (default: bench/results/sandbox.md for a run of all contenders with at least the default rounds, WORKDIR/sandbox.md otherwise)",
    )
    args = parser.parse_args(argv)
    if args.rounds < 1 or args.warmup < 0 or not args.only or set(args.only) - set(CONTENDERS):
        parser.error("--rounds >= 1, --warmup >= 0, --only a non-empty subset of 'abc'")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    command = shlex.join([_relative(sys.executable), _relative(sys.argv[0]), *sys.argv[1:]])
    loads_start = _load()
    wall_started = time.perf_counter()
    print(f"load average at start: {loads_start}", flush=True)
    image_id = ensure_image()
    workdir = args.workdir.resolve()
    bench = Bench(workdir, image_id, args.queries, args.documents)

    from grader.sandbox.engine import docker_client

    started = time.perf_counter()
    docker_client()
    client_s = time.perf_counter() - started

    contenders = {"a": bench.grader, "b": bench.bare, "c": bench.hardened}
    times: dict[str, list[float]] = {key: [] for key in args.only}
    for number in range(-args.warmup, args.rounds):
        row = []
        for key in args.only:
            seconds = contenders[key]()
            row.append(f"{key} {seconds:.3f}")
            if number >= 0:
                times[key].append(seconds)
        print(f"{'warm-up' if number < 0 else f'round {number + 1:>3}'}: {'  '.join(row)}", flush=True)

    phase_table: list[tuple[str, float, int]] = []
    phase_total = math.nan
    if args.profile_rounds > 0 and "a" in args.only:
        phase_table, phase_total = profile(bench, args.profile_rounds)
    loads_end = _load()
    text = report(
        times, args, command, machine_facts(), (loads_start, loads_end), client_s, phase_table, phase_total, time.perf_counter() - wall_started
    )
    print()
    print(text)
    full = args.only == "abc" and args.rounds >= DEFAULT_ROUNDS
    markdown = args.markdown or (REPO / "bench" / "results" / "sandbox.md" if full else workdir / "sandbox.md")
    markdown.parent.mkdir(parents=True, exist_ok=True)
    markdown.write_text(text, encoding="utf-8")
    print(f"wrote {markdown}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

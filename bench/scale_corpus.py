"""Grading a CoIR-size synthetic task through a real `grader serve`: wall time, time per document, peak memory per process.

    .venv/bin/python bench/scale_corpus.py [--documents 30000 100000] [--workers 1 2] [--queries 1000] [--markdown PATH]
    .venv/bin/python bench/scale_corpus.py --documents 3000 --workers 1 --queries 100 --submission DIR   # another ONNX model
    .venv/bin/python bench/scale_corpus.py --sharded [--shard-documents 16384] [--pin]   # ONNX grades in shard jobs

For each N (--documents) the task of bench/synthetic_corpus.py is generated once (bench/out/synthetic-N-sSEED,
reused) and, for each worker count (--workers), a fresh single-machine `grader serve --workers W` (local
workers, SQLite) grades submissions_example/onnx-lsa on its hidden split, one submission at a time, in the
Docker sandbox with 1 CPU and 4 GiB per container. The clock runs from `grader submit` starting to the
submission's row in the server's database reading `scored` (upload, claim, staging, encoding in the container, search,
scoring, signing): read from the database every 0.2 s, not asked of the API, whose status view costs the server about
4.5 ms of CPU a look (since 2026-12-05; before, the server's CPU column included about 22 ms a second of answering it). It starts once the
server has exported the workers' pseudonymous copy, which a competition does once at its first start and keeps (its
seconds are the last column: about 10 s at 300k documents; rows measured before 2026-12-04 17:00 UTC have no such
column and include it, less the 2 s the script waited for the workers), and its local workers, which it starts after
the copy, are up (each has bound its fingerprint). Rows measured before 2026-12-05 10:00 UTC started the clock when
the copy was written: they count the workers' start-up (about 1.5 s), and with --pin a worker not yet started then
was left unpinned (at 300k, no worker was pinned in 2 of 3 tries: those rows' "pinned" grades often were not).

While it runs, a sampler (every --sample-s seconds) reads, for `grader serve` and every process below it (its
local workers and the children they fork for a grade), the peak of RssAnon in /proc/PID/status (anonymous
resident memory: what a bound must hold, page cache excluded), and for every sandbox container whose owner
label names one of those processes, the container's memory cgroup: its peak (memory.max_usage_in_bytes on
cgroup v1, memory.peak on v2, page cache included) and the peak of its anonymous memory (memory.stat rss /
anon). A process or container that lives shorter than one sample interval can be missed; the grade's
processes live for the grade.

Unsharded, one grade runs on one worker whatever W is: the second worker idles. With --sharded the competition
sets [sharding] shard_documents: the grade runs as shard jobs (a query job, then one job per shard of whole
encoding chunks) which every local worker takes, each in a forked child of the worker (the "grade child" column,
one value per job) that stages the shard and runs it in a runner container of its own (the container column).
With --pin each local worker (and what it forks) is pinned to a CPU of its own (taskset), and its containers with it
(grader/sandbox/cpus.py); each container is also held to 1 CPU by its limit. With --confine a grade of W workers runs on the first W CPUs only: this script, the server and
all it starts, and the Docker engine (whose containers inherit its affinity): a W-CPU machine, the server's work
charged in every row (on a machine of two CPUs, one worker's grade otherwise leaves the server the second CPU). After
each N the speedup of W workers over one is printed.

The last column splits the grade's CPU time (from the clock's start to its end): the containers' (the report's cost
block: their cgroups' CPU, a lower bound), the local workers' (with the job children and watchdogs they reaped), the
server's (with its scoring processes), the engine's (dockerd, containerd) and this script's (its sampler), read from
/proc/PID/stat. Their sum over the wall time is how busy the machine's CPUs were.

What each column is bounded by (docs/scale.md, "Measured: sharded"): ``serve`` by what one grade's puts and merge
hold at once (flat in N: its allocator hands large buffers back, grader/hosting/allocator.py); ``worker`` by one
job's transient bytes (the same setting, and a trim after each job); a ``grade child`` and its container by the
shard's size and ``search_memory``, not N. The "server helpers" are processes `grader serve` spawns: the scoring
processes (:mod:`grader.grading.score_process`), which map the whole corpus's pseudonyms back to the real ids and
hold the run, so they grow with N by design (O(N) ids plus queries x depth), each within its address-space bound
(``ADDRESS_SPACE_BYTES``, 8 GiB) and replaced after ``JOBS_PER_PROCESS`` jobs; and, once per competition, the
export of the workers' copy (it sorts the corpus: O(N)).

``--heap DIR`` traces the Python allocations of the server and its workers (bench/heaptrace/sitecustomize.py) and
has each write a snapshot before and after the grade into DIR/N-wW/ (bench/heap_diff.py compares two); the wall
times of such a run mean nothing (tracing slows every allocation), nor does RssAnon (the traces count in it).
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import importlib.util
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

import machine  # noqa: E402
from sqlalchemy import text  # noqa: E402

from grader.hosting.db.session import open_database  # noqa: E402
from grader.hosting.participant.client import TERMINAL, HostingClient  # noqa: E402
from tests.hosting.support import Server, admin, write_competition  # noqa: E402

EXAMPLE = REPO / "submissions_example" / "onnx-lsa"
LIMITS = {"time_limit_s": 7200, "memory": "4g", "cpus": 1}
OWNER_PID_LABEL = "dev.grader.owner.pid"
SANDBOX_LABEL = "dev.grader.sandbox"


def load_generator():  # type: ignore[no-untyped-def]
    """bench/synthetic_corpus.py as a module (bench/ is not a package)."""
    spec = importlib.util.spec_from_file_location("synthetic_corpus", REPO / "bench" / "synthetic_corpus.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def benchmark_folder(workdir: Path, documents: int, queries: int, seed: int) -> tuple[Path, float]:
    """The generated benchmark for (documents, queries, seed), made once; and the seconds generating took (0 if reused)."""
    root = workdir / f"synthetic-{documents}-q{queries}-s{seed}"
    if (root / "benchmark.json").exists():
        return root, 0.0
    started = time.perf_counter()
    load_generator().generate(root, documents, queries, seed)
    return root, time.perf_counter() - started


def descendants(root: int) -> dict[int, str]:
    """``root`` and every process below it, each with its role: serve, worker (a child of serve), grade child
    (a child of a worker: the fork that grades), helper (a process the server spawned: a scoring process or the
    export of the workers' copy), or ``other:<program>`` (such as multiprocessing's resource tracker)."""
    parents: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
                parents[int(entry.name)] = int(stat[stat.rindex(")") + 2 :].split()[1])
            except (OSError, ValueError):
                continue
    roles, frontier = {root: "serve"}, [root]
    while frontier:
        pid = frontier.pop()
        for child in (c for c, parent in parents.items() if parent == pid):
            try:
                argv = Path(f"/proc/{child}/cmdline").read_bytes().split(b"\0")
            except OSError:
                continue
            is_worker = b"worker" in argv
            if roles[pid] == "serve" and is_worker:
                roles[child] = "worker"
            elif roles[pid] == "serve" and b"--multiprocessing-fork" in argv:
                roles[child] = "helper"  # spawned by the server: a scoring process, or the one-time export of the copy
            elif roles[pid] == "worker" and is_worker:
                roles[child] = "grade child"
            else:
                roles[child] = "other:" + Path(argv[0].decode("utf-8", "replace")).name
            frontier.append(child)
    return roles


#: The parts of a grade's CPU time, in the table's order (:func:`cpu_spent`; containers from the report's cost block).
CPU_PARTS = ("containers", "workers", "server", "engine", "script")
#: /proc/PID/stat's unit of CPU time.
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def _ticks(pid: int) -> tuple[int, int] | None:
    """(start time, CPU ticks of ``pid`` and of the children it reaped) from /proc/PID/stat; None once it is gone."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return int(fields[19]), sum(int(fields[i]) for i in (11, 12, 13, 14))


def engine_pids() -> list[int]:
    """The Docker engine's processes: dockerd's and containerd's."""
    return [
        int(pid) for name in ("dockerd", "containerd") for pid in subprocess.run(["pgrep", "-x", name], capture_output=True, text=True).stdout.split()
    ]


def cpu_ticks(serve_pid: int) -> dict[tuple[int, int], tuple[str, int]]:
    """CPU ticks so far of each process a grade runs in, by (pid, start time), each with its part: ``workers`` (the
    local workers, with the job children and watchdogs they reaped), ``server`` (with its scoring processes), ``engine``
    (dockerd, containerd) and ``script`` (this one, with the engine calls it made). A process that ended counts in
    the one that reaped it; the containers' processes are reaped outside (the report's cost block counts them)."""
    parts = {pid: "workers" if role in ("worker", "grade child") else "server" for pid, role in descendants(serve_pid).items()}
    parts.update(dict.fromkeys(engine_pids(), "engine"))
    parts[os.getpid()] = "script"
    found = {}
    for pid, part in parts.items():
        ticks = _ticks(pid)
        if ticks is not None:
            found[(pid, ticks[0])] = (part, ticks[1])
    return found


def cpu_spent(before: dict[tuple[int, int], tuple[str, int]], after: dict[tuple[int, int], tuple[str, int]]) -> dict[str, float]:
    """CPU-seconds each part spent between two :func:`cpu_ticks`: what its processes hold after less what they held
    before, those gone since included (a process that ended holds nothing; the one that reaped it holds its whole time,
    what it had used before the first count too). A process born between them counts whole."""
    spent = dict.fromkeys(CPU_PARTS[1:], 0.0)  # the containers' come from the report
    for part, ticks in after.values():
        spent[part] += ticks / CLOCK_TICKS
    for part, ticks in before.values():
        spent[part] -= ticks / CLOCK_TICKS
    return spent


def rss_anon_kib(pid: int) -> int | None:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("RssAnon:"):
                return int(line.split()[1])
    except OSError:
        return None
    return None


def running_containers() -> list[tuple[str, Path]]:
    """(id, memory cgroup folder) of each running container, read from the cgroup file system (no engine call)."""
    found = []
    v1 = Path("/sys/fs/cgroup/memory/docker")
    if v1.is_dir():
        found += [(folder.name, folder) for folder in v1.iterdir() if folder.is_dir() and len(folder.name) == 64]
    v2 = Path("/sys/fs/cgroup/system.slice")
    if v2.is_dir():
        found += [(folder.name[7:-6], folder) for folder in v2.glob("docker-*.scope")]
    return found


def sandbox_owner(container_id: str) -> int | None:
    """The pid a sandbox container's owner label names; None for another container (or one gone)."""
    labels = subprocess.run(
        [
            "docker",
            "inspect",
            "--format",
            '{{index .Config.Labels "' + SANDBOX_LABEL + '"}} {{index .Config.Labels "' + OWNER_PID_LABEL + '"}}',
            container_id,
        ],
        capture_output=True,
        text=True,
    ).stdout.split()
    return int(labels[1]) if len(labels) == 2 and labels[1].isdigit() else None


def cgroup_figures(folder: Path) -> tuple[int | None, int | None]:
    """(peak bytes, anonymous bytes now) of a memory cgroup."""
    peak = None
    for name in ("memory.max_usage_in_bytes", "memory.peak"):
        try:
            peak = int((folder / name).read_text().split()[0])
            break
        except (OSError, ValueError):
            continue
    anon = None
    try:
        for line in (folder / "memory.stat").read_text().splitlines():
            key, value = line.split()
            if key in ("total_rss", "anon") or (key == "rss" and anon is None):
                anon = int(value)
    except (OSError, ValueError):
        pass
    return peak, anon


@dataclass
class Sampler:
    """Polls peak anonymous RSS of a process tree and the memory cgroups of its sandbox containers."""

    root_pid: int
    interval: float = 0.5
    processes: dict[int, tuple[str, int]] = field(default_factory=dict)  # pid -> (name, peak RssAnon KiB)
    containers: dict[str, tuple[int, int]] = field(default_factory=dict)  # id -> (peak bytes, peak anon bytes)
    owners: dict[str, int | None] = field(default_factory=dict)  # id -> the pid its owner label names (None: not a sandbox)
    _stop: threading.Event = field(default_factory=threading.Event)

    def sample(self) -> None:
        tree = descendants(self.root_pid)
        for pid, name in tree.items():
            value = rss_anon_kib(pid)
            if value is not None:
                old = self.processes.get(pid, (name, 0))
                self.processes[pid] = (old[0] if old[1] else name, max(old[1], value))
        for container_id, folder in running_containers():
            if container_id not in self.owners:  # asked once a container: a `docker ps` each tick cost 3-4 CPU-seconds a grade
                self.owners[container_id] = sandbox_owner(container_id)
            owner = self.owners[container_id]
            if owner is None or owner not in tree:
                continue
            peak, anon = cgroup_figures(folder)
            old = self.containers.get(container_id, (0, 0))
            self.containers[container_id] = (max(old[0], peak or 0), max(old[1], anon or 0))

    def run(self) -> None:
        while not self._stop.is_set():
            self.sample()
            self._stop.wait(self.interval)

    def __enter__(self) -> Sampler:
        self._thread = threading.Thread(target=self.run, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


def pin_workers(serve_pid: int, count: int) -> None:
    """Pin each of the ``count`` local workers (and what it forks later) to a CPU of its own: worker i to CPU i mod
    nproc (``taskset``), and each worker's sandbox containers with it (a pinned worker gives its containers its CPUs
    as their cpuset: grader/sandbox/cpus.py). Refused unless exactly ``count`` workers are found: a worker missed
    would run, with its containers, on any CPU.
    """
    workers = sorted(pid for pid, role in descendants(serve_pid).items() if role == "worker")
    if len(workers) != count:
        raise SystemExit(f"found {len(workers)} local worker(s) of `grader serve` to pin, not {count}")
    for number, pid in enumerate(workers):
        subprocess.run(["taskset", "-a", "-p", "-c", str(number % (os.cpu_count() or 1)), str(pid)], check=True, capture_output=True)


def wait_workers_bound(server_log: Path, count: int, timeout_s: float = 300.0) -> None:
    """Until the server's log says that ``count`` local workers bound their fingerprints: each has started, loaded
    what it searches with and is about to claim.

    The server starts its local workers only once it has exported their copy of the data, so a clock started when the
    copy is written would count their start-up (about 1.5 s of imports here), and a worker not yet started could not
    be pinned. The server's log is this grade's own (a fresh state folder for each grade).
    """
    deadline = time.monotonic() + timeout_s
    while True:
        text = server_log.read_text(encoding="utf-8", errors="replace") if server_log.is_file() else ""
        bound = sum(1 for line in text.splitlines() if "fingerprint" in line and line.endswith(" bound"))
        if bound >= count:
            return
        if time.monotonic() > deadline:
            raise SystemExit(f"{bound} of {count} local workers bound their fingerprints within {timeout_s:.0f} s ({server_log})")
        time.sleep(0.05)


@contextlib.contextmanager
def confined(cpus: int) -> Iterator[None]:
    """Within it, this process (and all it starts: the server, its workers, their children) and the Docker engine (and
    the containers it starts, which inherit its affinity) run on the first ``cpus`` CPUs only: a machine of ``cpus``
    CPUs for W workers. The affinities are put back after."""
    allowed = sorted(os.sched_getaffinity(0))
    chosen = ",".join(str(cpu) for cpu in allowed[:cpus])
    every = ",".join(str(cpu) for cpu in allowed)
    engine = engine_pids()
    os.sched_setaffinity(0, allowed[:cpus])
    for pid in engine:
        subprocess.run(["taskset", "-a", "-p", "-c", chosen, str(pid)], check=True, capture_output=True)
    try:
        yield
    finally:
        os.sched_setaffinity(0, allowed)
        for pid in engine:
            subprocess.run(["taskset", "-a", "-p", "-c", every, str(pid)], check=False, capture_output=True)


def wait_ended(state: Path, submission_id: str, poll_s: float = 0.2, timeout_s: float = 7200.0) -> None:
    """Until the submission has ended, read from the server's database as its operator can, not asked of its API.

    Asking the API is what a participant does, and it is not free: a status view costs `grader serve` about 4.5 ms of
    CPU (measured on an idle server with a waiting submission: 13.7 ms/s of CPU with no poll, 35.7 ms/s polled every
    0.2 s), about 3 CPU-seconds of a 150 s grade, taken from the containers the grade measures once two workers keep
    both CPUs busy. One indexed row read a poll costs the server nothing.
    """
    db = open_database(state, upgrade=False)
    deadline = time.monotonic() + timeout_s
    try:
        while True:
            with db.session() as session:
                row = session.execute(text("SELECT state FROM submissions WHERE id = :id"), {"id": submission_id}).scalar_one()
            if row in TERMINAL:
                return
            if time.monotonic() > deadline:
                raise SystemExit(f"{submission_id} still {row} after {timeout_s:.0f} s")
            time.sleep(poll_s)
    finally:
        db.dispose()


def stored_envelope(state: Path, submission_id: str) -> bytes:
    """The signed full report of a scored submission, read from the server's state as its operator can (a participant
    gets a hidden grade's full report only after the competition's end); for callers that compare it (bench/coir_shape.py)."""
    db = open_database(state)
    try:
        with db.session() as session:
            path = session.execute(
                text("SELECT r.envelope_path FROM results r JOIN submissions s ON s.result_id = r.id WHERE s.id = :id"), {"id": submission_id}
            ).scalar_one()
    finally:
        db.dispose()
    return Path(path).read_bytes()


def grade(
    bench_root: Path,
    workers: int,
    scratch: Path,
    sample_s: float,
    submission: Path = EXAMPLE,
    shard_documents: int | None = None,
    *,
    pin: bool = False,
    confine: bool = False,
    heap: Path | None = None,
) -> dict:
    """One fresh server with ``workers`` local workers grading ``submission`` once (in shard jobs with ``shard_documents``); the figures.

    With ``heap``, the server and its workers trace their Python allocations (:func:`trace_heaps`) and each dumps a
    snapshot before the grade and after it (:func:`heap_dumps`): their paths by role are in the figures' ``heaps``.
    """
    tables = {
        "limits": LIMITS,
        "quotas": {"per_day": 100, "total": 100, "concurrent": 2},
        "queue": {"lease_s": 60, "heartbeat_s": 10, "redispatch_s": 30, "reap_every_s": 2},
    }
    if shard_documents is not None:
        tables["sharding"] = {"shard_documents": shard_documents}
    competition = write_competition(scratch / "c.toml", benchmark=str(bench_root), tables=tables)
    with confined(workers) if confine else contextlib.nullcontext():
        return _grade(competition, workers, scratch, sample_s, submission, pin=pin, heap=heap)


def _grade(competition: Path, workers: int, scratch: Path, sample_s: float, submission: Path, *, pin: bool, heap: Path | None) -> dict:
    """:func:`grade` once its competition file is written."""
    with trace_heaps(heap):
        started_server = time.perf_counter()
        server = Server(competition, scratch / "state", workers=workers).start()
    heaps: dict[str, list[Path]] = {}
    try:
        client = HostingClient(server.url, admin(server.state, "add-participant", "bench").strip())
        assert server.process is not None
        copy_s = copy_exported(server.state, started_server)
        wait_workers_bound(server.log, workers)  # the local workers' start-up is not the grade's
        if pin:
            pin_workers(server.process.pid, workers)
        if heap is not None:
            heaps = {role: [path] for role, path in heap_dumps(server.process.pid, heap).items()}
        with Sampler(server.process.pid, sample_s) as sampler:
            ticks = cpu_ticks(server.process.pid)
            started = time.perf_counter()
            submission_id = client.submit(submission)["id"]
            wait_ended(server.state, submission_id)
            wall = time.perf_counter() - started
            spent = cpu_spent(ticks, cpu_ticks(server.process.pid))
        view = client.status(submission_id)
        if view["state"] != "scored":
            raise SystemExit(f"grade ended {view['state']}: {json.dumps(view)[:600]}; server log {server.log}")
        if heap is not None:
            for role, path in heap_dumps(server.process.pid, heap).items():
                heaps.setdefault(role, []).append(path)
        report = stored_envelope(server.state, submission_id)
    finally:
        server.stop()
    cost = json.loads(base64.b64decode(json.loads(report)["payload"]))["predicate"].get("cost") or {}
    spent["containers"] = float((cost.get("total") or {}).get("cpu_s") or 0.0)
    return {
        "wall_s": wall,
        "cpu_s": spent,
        "copy_s": copy_s,
        "processes": sampler.processes,
        "containers": sampler.containers,
        "view": view,
        "heaps": heaps,
        "report": report,
    }


def keep_logs(scratch: Path, into: Path) -> None:
    """Copy a grade's server log and its local workers' logs (``state/run/*.log``) into the folder ``into``."""
    into.mkdir(parents=True, exist_ok=True)
    for log in [scratch / "state-server.log", *sorted((scratch / "state" / "run").glob("*.log"))]:
        if log.is_file():  # a server that failed to start wrote no worker logs
            shutil.copyfile(log, into / ("server.log" if log.parent == scratch else log.name))


def copy_exported(state: Path, since: float, timeout_s: float = 1800.0) -> float:
    """Seconds from ``since`` until the server has exported the workers' pseudonymous copy (its manifest written last).

    A competition's server exports it once, at its first start (O(N): it sorts the corpus), and keeps it across starts:
    a host's grades do not pay it, so the grade's clock starts after it. Its time is reported apart.
    """
    manifest = state / "worker-data" / "worker-data.json"
    while not manifest.is_file():
        if time.perf_counter() - since > timeout_s:
            raise SystemExit(f"the workers' copy was not exported within {timeout_s:.0f} s ({manifest})")
        time.sleep(0.1)
    return time.perf_counter() - since


HEAP_SITE = REPO / "bench" / "heaptrace"


@contextlib.contextmanager
def trace_heaps(folder: Path | None) -> Iterator[None]:
    """Within it, a `grader serve` started (and the workers it starts) traces its Python allocations into ``folder``
    (bench/heaptrace/sitecustomize.py, through PYTHONPATH and GRADER_BENCH_HEAP_DIR); nothing without a folder."""
    if folder is None:
        yield
        return
    folder.mkdir(parents=True, exist_ok=True)
    saved = {name: os.environ.get(name) for name in ("PYTHONPATH", "GRADER_BENCH_HEAP_DIR")}
    os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (str(HEAP_SITE), saved["PYTHONPATH"]) if p)
    os.environ["GRADER_BENCH_HEAP_DIR"] = str(folder)
    try:
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def heap_dumps(serve_pid: int, folder: Path, timeout: float = 300) -> dict[str, Path]:
    """Ask the traced server and each of its workers for a snapshot (SIGUSR1) and wait for them: each one's
    ``.snap`` path, by role (``serve``, ``worker 1``, ...: workers in pid order)."""
    deadline = time.monotonic() + timeout
    roles = descendants(serve_pid)
    traced = [serve_pid, *sorted(pid for pid, role in roles.items() if role == "worker")]
    for pid in traced:  # a process signalled before its handler is in place would end
        while not (folder / f"{pid}.ready").exists():
            if time.monotonic() > deadline:
                raise SystemExit(f"process {pid} did not install its heap handler within {timeout:g} s (is it traced?)")
            time.sleep(0.2)
    before = {pid: len(list(folder.glob(f"{pid}-*.json"))) for pid in traced}
    for pid in traced:
        os.kill(pid, signal.SIGUSR1)
    found: dict[str, Path] = {}
    for number, pid in enumerate(traced):
        path = folder / f"{pid}-{before[pid] + 1}.json"
        while not path.exists():
            if time.monotonic() > deadline:
                raise SystemExit(f"process {pid} wrote no heap snapshot within {timeout:g} s (is it traced?)")
            time.sleep(0.2)
        found["serve" if number == 0 else f"worker {number}"] = path.with_suffix(".snap")
    return found


def mib(kib_or_bytes: float, *, bytes_: bool = False) -> str:
    return f"{kib_or_bytes / (1 << 20 if bytes_ else 1 << 10):.1f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--documents", type=int, nargs="+", default=[30000, 100000])
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--queries", type=int, default=1000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--submission", type=Path, default=EXAMPLE, help="an ONNX submission folder (default: the example, onnx-lsa)")
    parser.add_argument("--sharded", action="store_true", help="grade in shard jobs across the workers ([sharding] shard_documents)")
    parser.add_argument("--shard-documents", type=int, default=16384, help="documents per shard with --sharded (rounded up to chunks of 8,192)")
    parser.add_argument("--pin", action="store_true", help="pin each local worker to a CPU of its own (taskset)")
    parser.add_argument(
        "--confine",
        action="store_true",
        help="run each grade of W workers on the first W CPUs only: server, workers, engine, containers and this script (a W-CPU machine)",
    )
    parser.add_argument("--sample-s", type=float, default=0.5)
    parser.add_argument("--workdir", type=Path, default=REPO / "bench" / "out")
    parser.add_argument("--markdown", type=Path, default=None, help="append the results as Markdown to this file")
    parser.add_argument(
        "--keep-logs",
        type=Path,
        default=None,
        help="copy each grade's server log and its local workers' logs (each shard job's end and seconds) into a folder of this one",
    )
    parser.add_argument(
        "--repeat", type=int, default=1, help="grade each (N, workers) this many times, alternating; report the median speedup of the walls"
    )
    parser.add_argument(
        "--heap",
        type=Path,
        default=None,
        help="trace the server's and workers' Python allocations; snapshots before and after each grade in this folder",
    )
    args = parser.parse_args()
    args.workdir.mkdir(parents=True, exist_ok=True)
    command = (
        "GRADER_RUNNER_IMAGE="
        + os.environ.get("GRADER_RUNNER_IMAGE", "grader-runner:dev")
        + " .venv/bin/python bench/scale_corpus.py "
        + " ".join(sys.argv[1:])
    )
    lines = [
        f"$ {command}",
        machine.machine_line(),
    ]
    lines.append(
        "| N docs | workers | wall (s) | ms/doc | public NDCG@10 | serve RssAnon (MiB) | worker RssAnon (MiB) | grade child RssAnon (MiB) "
        "| container peak / anon (MiB) | server helpers RssAnon (MiB) | workers' copy (s, before the clock) "
        "| CPU-s: containers / workers / server / engine / script |"
    )
    lines.append("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    print("\n".join(lines), flush=True)
    speedups = []
    for documents in args.documents:
        walls: dict[int, list[float]] = {}
        root, made = benchmark_folder(args.workdir, documents, args.queries, args.seed)
        if made:
            print(f"# generated {root} in {made:.1f} s", flush=True)
        for round_, workers in ((r, w) for r in range(args.repeat) for w in args.workers):  # alternating: a drift hits both alike
            load = os.getloadavg()[0]
            with tempfile.TemporaryDirectory(prefix="grader-bench-scale-") as scratch:
                try:
                    result = grade(
                        root,
                        workers,
                        Path(scratch),
                        args.sample_s,
                        args.submission,
                        args.shard_documents if args.sharded else None,
                        pin=args.pin,
                        confine=args.confine,
                        heap=None if args.heap is None else args.heap / f"{documents}-w{workers}",
                    )
                finally:  # a grade that did not end scored is the one whose logs are wanted most
                    if args.keep_logs is not None:
                        keep_logs(Path(scratch), args.keep_logs / f"{documents}-w{workers}-r{round_ + 1}")
            walls.setdefault(workers, []).append(result["wall_s"])
            row = table_row(documents, workers, result)
            if args.repeat > 1:
                row += f" <!-- round {round_ + 1} of {args.repeat}, load {load:.1f} before -->"
            lines.append(row)
            print(row, flush=True)
            detail = {
                "documents": documents,
                "workers": workers,
                "wall_s": round(result["wall_s"], 2),
                "copy_s": round(result["copy_s"], 2),
                "cpu_s": {part: round(seconds, 1) for part, seconds in result["cpu_s"].items()},
                "rss_anon_kib": [[role, peak] for _pid, (role, peak) in sorted(result["processes"].items())],
                "containers_bytes": list(result["containers"].values()),
            }
            if result["heaps"]:
                detail["heaps"] = {role: [str(path) for path in paths] for role, paths in result["heaps"].items()}
            print("# " + json.dumps(detail), flush=True)
        if 1 in walls:
            for w in sorted(walls):
                if w == 1:
                    continue
                ratios = sorted(one / many for one, many in zip(walls[1], walls[w], strict=True))
                each = "" if len(ratios) == 1 else f" (median of {len(ratios)}: {', '.join(f'{r:.2f}' for r in ratios)})"
                speedups.append(f"# N = {documents:,}: {w} workers {statistics.median(ratios):.2f}x one worker{each}")
    lines += speedups
    print("\n".join(speedups), flush=True)
    if args.markdown:
        with open(args.markdown, "a", encoding="utf-8") as out:
            out.write("\n```\n" + "\n".join(lines) + "\n```\n")


def table_row(documents: int, workers: int, result: dict) -> str:
    """One Markdown row: per-process peaks grouped by role (serve, each worker, each grade child, each server helper), each container."""
    by_role: dict[str, list[int]] = {"serve": [], "worker": [], "grade child": [], "helper": []}
    for _pid, (role, peak) in sorted(result["processes"].items()):
        by_role.setdefault(role, []).append(peak)
    serve, worker, child, helpers = by_role["serve"], by_role["worker"], by_role["grade child"], by_role["helper"]
    containers = [f"{mib(p, bytes_=True)} / {mib(a, bytes_=True)}" for p, a in result["containers"].values()]
    score = result["view"].get("score")
    cpu = " / ".join(f"{result['cpu_s'][part]:.1f}" for part in CPU_PARTS)
    return (
        f"| {documents:,} | {workers} | {result['wall_s']:.1f} | {1000 * result['wall_s'] / documents:.3f} | "
        f"{score if score is None else f'{float(score):.4f}'} | {', '.join(mib(v) for v in serve)} | {', '.join(mib(v) for v in worker)} | "
        f"{', '.join(mib(v) for v in child) or '-'} | {'; '.join(containers) or '-'} | {', '.join(mib(v) for v in helpers) or '-'} | "
        f"{result['copy_s']:.1f} | {cpu} |"
    )


if __name__ == "__main__":
    main()

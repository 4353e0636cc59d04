"""The report's ``cost`` block: its shape and bounds, and where its figures come from (docs/reports.md, The cost block).

No timing is asserted anywhere: the figures vary between runs by design. What is asserted is what can
fail: every figure is a bounded number or null *with its reason*, a figure past the schema's maxima is
refused, the cgroup and RAPL readers read the files they should (fake trees here) and say why when they
cannot, and the totals refuse to add up a partial sum.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from grader.errors import ReportError
from grader.grading.cost import SCHEME, RankCost, TaskCost, cost_block, per_thousand_queries, resumed_task
from grader.grading.energy import DEDICATED_ENV, EnergyMeter
from grader.reports.example import example_report
from grader.reports.model import validate_report
from grader.sandbox.usage import CgroupSampler, ResourceUsage, cgroup_files

MEASURED = ResourceUsage(12.5, 300 << 20, "wait4 of the encoder's child process")


def _task(rank: RankCost | None = None, *, score_s: float | None = 0.25) -> dict[str, Any]:
    return TaskCost(texts=110, queries=10, rank=rank, score_s=score_s).as_json()


def _with_cost(cost: dict[str, Any]) -> dict[str, Any]:
    return {**example_report(), "cost": cost}


def test_a_measured_task_validates_and_every_null_says_why() -> None:
    entry = _task(RankCost(4.0, MEASURED, search_s=0.5, tokens=2200))
    block = cost_block({"t": entry, "resumed": resumed_task()}, source="grader", fingerprint="a" * 64)
    validate_report(_with_cost(block))
    assert block["scheme"] == SCHEME and block["source"] == "grader"
    assert entry["cpu_s"] == 12.5 and entry["peak_memory_bytes"] == 300 << 20
    assert entry["texts_per_s"] == 110 / 4.0 and entry["tokens_per_s"] == 2200 / 4.0
    # Energy is never measured by this test's meter: null, and the reason is there.
    assert entry["energy_j"] is None and entry["missing"] == {"energy_j": "not measured"}
    # A resumed task cost nothing in this run: out of the totals.
    assert block["total"] == {"cpu_s": 12.5, "queries": 10, "cpu_s_per_1000_queries": 1250.0}


def test_a_task_that_failed_before_its_encoder_ran_has_nulls_with_reasons() -> None:
    entry = _task(None, score_s=None)
    validate_report(_with_cost(cost_block({"t": entry}, source="worker")))
    nulls = {key for key in ("cpu_s", "peak_memory_bytes", "tokens", "energy_j") if entry[key] is None}
    nulls |= {f"{key}_s" for key, value in entry["wall_s"].items() if value is None}
    assert nulls == {"cpu_s", "peak_memory_bytes", "tokens", "energy_j", "encode_s", "search_s", "score_s"}
    assert set(entry["missing"]) == nulls
    assert entry["texts_per_s"] is None  # no time measured: no rate


def test_the_total_is_null_when_a_graded_task_is_unmeasured() -> None:
    unmeasured = _task(RankCost(1.0, ResourceUsage.unmeasured("the container's cgroup is not visible here")))
    block = cost_block({"a": _task(RankCost(1.0, MEASURED)), "b": unmeasured}, source="grader")
    assert block["total"]["cpu_s"] is None and block["total"]["cpu_s_per_1000_queries"] is None
    assert unmeasured["missing"]["cpu_s"] == "the container's cgroup is not visible here"
    assert per_thousand_queries(3.0, 0) is None


@pytest.mark.parametrize(
    ("pointer", "value"),
    [
        ("cpu_s", 1e9),  # past the maximum: a worker's word is bounded
        ("cpu_s", -1.0),
        ("peak_memory_bytes", 1 << 51),
        ("energy_j", 1e11),
        ("texts_per_s", 2e9),
        ("measured_by", "x" * 301),
        ("missing", {"cpu_s": ""}),  # a null needs a reason, not an empty one
        ("missing", {"anything": "why"}),
        ("extra_figure", 1.0),
    ],
)
def test_the_schema_bounds_each_figure(pointer: str, value: Any) -> None:
    block = cost_block({"t": _task(RankCost(1.0, MEASURED))}, source="worker")
    validate_report(_with_cost(block))
    block["tasks"]["t"][pointer] = value
    with pytest.raises(ReportError, match="invalid report at /cost/tasks/t"):
        validate_report(_with_cost(block))


def test_the_block_names_its_scheme_and_source() -> None:
    block = cost_block({"t": _task(RankCost(1.0, MEASURED))}, source="worker")
    for broken in ({**block, "source": "participant"}, {**block, "scheme": "grader-cost/v0"}, {**block, "machine": {"cpus": 0, "fingerprint": None}}):
        with pytest.raises(ReportError, match="invalid report at /cost"):
            validate_report(_with_cost(broken))
    with pytest.raises(ReportError, match="unknown cost source"):
        cost_block({}, source="participant")


def test_wall_seconds_are_bounded() -> None:
    entry = _task(RankCost(2e7, MEASURED))  # 231 days: past the bound
    with pytest.raises(ReportError, match="/cost/tasks/t/wall_s/encode"):
        validate_report(_with_cost(cost_block({"t": entry}, source="worker")))


# --------------------------------------------------------------------------- cgroup files


def _v2(root: Path, container: str, *, peak: bool = True) -> Path:
    (root / "cgroup.controllers").parent.mkdir(parents=True, exist_ok=True)
    (root / "cgroup.controllers").write_text("cpu memory\n")
    folder = root / "system.slice" / f"docker-{container}.scope"
    folder.mkdir(parents=True)
    (folder / "cpu.stat").write_text("usage_usec 2500000\nuser_usec 2000000\nsystem_usec 500000\n")
    if peak:
        (folder / "memory.peak").write_text("73400320\n")
    return folder


def test_cgroup_v2_figures_are_read(tmp_path: Path) -> None:
    _v2(tmp_path, "c1")
    sampler = CgroupSampler("c1", tmp_path).start()
    usage = sampler.stop()
    assert (usage.cpu_s, usage.peak_memory_bytes, usage.missing) == (2.5, 73400320, {})
    assert "cgroup v2 cpu.stat and memory.peak" in usage.method


def test_cgroup_v2_without_memory_peak_names_the_kernel(tmp_path: Path) -> None:
    _v2(tmp_path, "c1", peak=False)
    usage = CgroupSampler("c1", tmp_path).start().stop()
    assert usage.cpu_s == 2.5 and usage.peak_memory_bytes is None
    assert usage.missing == {"peak_memory_bytes": "memory.peak needs cgroup v2 on kernel 5.19 or later"}


def test_cgroup_v1_figures_are_read(tmp_path: Path) -> None:
    for controller, name, value in (("cpuacct", "cpuacct.usage", "1500000000"), ("memory", "memory.max_usage_in_bytes", "1048576")):
        folder = tmp_path / controller / "docker" / "c2"
        folder.mkdir(parents=True)
        (folder / name).write_text(value + "\n")
    usage = CgroupSampler("c2", tmp_path).start().stop()
    assert (usage.cpu_s, usage.peak_memory_bytes, usage.missing) == (1.5, 1048576, {})


def test_an_invisible_cgroup_is_null_with_the_reason(tmp_path: Path) -> None:
    assert isinstance(cgroup_files("c3", tmp_path), str)
    usage = CgroupSampler("c3", tmp_path).start().stop()
    assert usage.cpu_s is None and usage.peak_memory_bytes is None
    assert set(usage.missing) == {"cpu_s", "peak_memory_bytes"} and "not visible" in usage.missing["cpu_s"]


def test_the_last_figures_read_survive_the_cgroup_going_away(tmp_path: Path) -> None:
    folder = _v2(tmp_path, "c4")
    sampler = CgroupSampler("c4", tmp_path)  # not started: the samples are taken here, in order
    sampler._sample()  # a read while the container runs
    sampler._sample()
    for child in folder.iterdir():
        child.unlink()
    folder.rmdir()
    sampler._sample()  # the engine removed the folder as the container exited
    usage = sampler.stop()
    assert (usage.cpu_s, usage.peak_memory_bytes) == (2.5, 73400320)


# --------------------------------------------------------------------------- RAPL


def _rapl(root: Path, energy: int, wrap: int = 1_000_000_000) -> Path:
    package = root / "intel-rapl:0"
    package.mkdir(parents=True, exist_ok=True)
    (package / "energy_uj").write_text(f"{energy}\n")
    (package / "max_energy_range_uj").write_text(f"{wrap}\n")
    return package


def test_no_rapl_is_null_with_the_reason(tmp_path: Path) -> None:
    reading = EnergyMeter(tmp_path / "absent").start().stop()
    assert reading.joules is None and "no RAPL" in reading.reason


def test_rapl_is_not_attributed_unless_the_operator_says_the_machine_is_dedicated(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(DEDICATED_ENV, raising=False)
    meter = EnergyMeter(tmp_path).start() if _rapl(tmp_path, 999_000_000) else None
    assert meter is not None
    _rapl(tmp_path, 4_000_000)  # wrapped past max_energy_range_uj: 5 J in all
    reading = meter.stop()
    assert reading.joules is None and "whole CPU packages (5.0 J" in reading.reason
    monkeypatch.setenv(DEDICATED_ENV, "1")
    meter = EnergyMeter(tmp_path).start()
    _rapl(tmp_path, 6_500_000)
    assert meter.stop().joules == 2.5


def test_a_root_only_rapl_counter_is_null_with_the_reason(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _rapl(tmp_path, 1)
    real = Path.read_text

    def root_only(path: Path, *args: Any, **kwargs: Any) -> str:
        if path.name == "energy_uj":  # mode 0400 root: what a kernel since 2020 gives a user (root would read it)
            raise PermissionError(13, "Permission denied", str(path))
        return real(path, *args, **kwargs)

    monkeypatch.setattr(Path, "read_text", root_only)
    reading = EnergyMeter(tmp_path).start().stop()
    assert reading.joules is None and "root-only" in reading.reason

"""The step anatomy in the collector: per-epoch columns and the four findings built on
them, each on scenario runs stored through the write path with its effect present and
absent. Numbers are worked out by hand from the shares each scenario writes."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from collector.analysis.epochs import build_report
from collector.arguments import build_parser
from collector.findings.engine import Finding, run_findings
from collector.views.printers import render
from tests.support.run_builder import NS, T0_NS, RunBuilder

pytest_plugins = ["tests.support.analysis_stores"]  # the make_store fixture

MB = 1e6
DAY = 86_400 * NS


def findings_of(store, run_id: str, rule: str) -> list[Finding]:
    return [f for f in run_findings(store, run_id) if f.rule == rule]


def cli(store, *argv: str) -> str:
    return render(build_parser().parse_args(list(argv)), store)


# --------------------------------------------------------------------------------------
# columns
# --------------------------------------------------------------------------------------


def two_host_run() -> RunBuilder:
    run = RunBuilder("cols", hosts=("n1", "n2"), ranks_per_host=2, steps_per_epoch=5)
    # n1's ranks wait 30% for input, n2's 10%; all compute 50%, all-reduce 10%
    shares = {"n1": (0.30, 0.50, 0.10), "n2": (0.10, 0.50, 0.10)}
    run.epoch(100, 6400, shares=lambda host, rank: shares[host], reads=(2_000_000, 5_000_000))
    run.epoch(100, 6400, shares=(0.0, 0.8, 0.1), reads=(0, 1_000_000))
    return run


def test_report_shares_per_host_and_all_hosts(make_store):
    store = make_store(two_host_run().points())
    rows = {(r.host, r.epoch): r for r in build_report(store, "cols").rows}
    assert rows[("n1", 1)].input_wait_percent == 30.0
    assert rows[("n2", 1)].input_wait_percent == 10.0
    assert rows[("*", 1)].input_wait_percent == 20.0  # pooled over the 4 ranks' seconds
    assert (rows[("*", 1)].compute_percent, rows[("*", 1)].communication_percent) == (50.0, 10.0)
    assert (rows[("*", 2)].input_wait_percent, rows[("*", 2)].compute_percent) == (0.0, 80.0)
    # the training's own reads: 2 ranks x 2 MB from storage, 2 x (5 - 2) MB from the cache
    assert rows[("n1", 1)].training_read_bytes == 4_000_000
    assert rows[("n1", 1)].training_cache_read_bytes == 6_000_000
    assert rows[("*", 1)].training_read_bytes == 8_000_000
    assert rows[("*", 2)].training_cache_read_bytes == 4_000_000


def test_json_and_table_show_the_same_values(make_store):
    store = make_store(two_host_run().points())
    rows = json.loads(cli(store, "report", "cols", "--format", "json"))["rows"]
    star = next(r for r in rows if r["host"] == "*" and r["epoch"] == 1)
    assert (star["input_wait_percent"], star["compute_percent"]) == (20.0, 50.0)
    assert star["communication_percent"] == 10.0
    assert star["training_read_bytes"] == 8_000_000
    table = cli(store, "report", "cols")
    assert "input %" in table and "comm %" in table and "own read" in table
    assert " 20.0 " in table


def test_runs_without_anatomy_show_no_share(make_store):
    run = RunBuilder("plain", steps_per_epoch=5)
    run.epoch(100, 6400)
    store = make_store(run.points())
    (host_row, star) = build_report(store, "plain").rows
    assert host_row.input_wait_percent is None and star.communication_percent is None
    assert host_row.training_read_bytes is None


# --------------------------------------------------------------------------------------
# the scaling loss, explained by the step anatomy: one finding (collector.findings.engine'
# scaling_loss) whose explanation is the anatomy's attribution when both runs have one
# --------------------------------------------------------------------------------------

STEPS = 5


def scaling_pair(
    two_rank_seconds: float,
    parts: tuple[float, float, float] = (1.0, 17.0, 0.0),
    first_epoch_seconds: float | None = None,
    epochs: int = 2,
    **unlike,
) -> list[RunBuilder]:
    """A 1-rank reference (5 steps of 20 s per epoch: input 1, compute 17, all-reduce 0,
    other 2; 100 images/s) and a 2-rank run whose steps take ``two_rank_seconds`` / 5 with
    ``parts`` (input wait, compute, all-reduce seconds per step; the rest is other).
    ``first_epoch_seconds``: the 2-rank run's epoch 1 (start-up) takes this long with the
    reference's parts scaled; ``unlike``: RunBuilder settings of the 2-rank run alone."""
    one = RunBuilder("one", steps_per_epoch=STEPS)
    for _ in range(epochs):
        one.epoch(100, 10_000, shares=(0.05, 0.85, 0.0), net_rx=0.1 * MB, net_tx=0.1 * MB)
    two = RunBuilder("two", ranks_per_host=2, steps_per_epoch=STEPS, t0_ns=T0_NS + DAY, **unlike)
    step = two_rank_seconds / STEPS
    for epoch in range(epochs):
        seconds = first_epoch_seconds if epoch == 0 and first_epoch_seconds else two_rank_seconds
        two.epoch(
            seconds,
            10_000,
            shares=tuple(part / step for part in parts),
            net_rx=50 * MB,
            net_tx=50 * MB,
        )
    return [one, two]


def scaling_findings(make_store, runs: list[RunBuilder], run_id: str = "two") -> list[Finding]:
    store = make_store([p for run in runs for p in run.points()])
    found = run_findings(store, run_id)
    # one finding about scaling, never a second one beside it
    assert not any("scaling" in f.rule and f.rule != "scaling_loss" for f in found)
    return [f for f in found if f.rule == "scaling_loss"]


def test_scaling_loss_is_put_on_the_all_reduce_that_grew(make_store):
    # two ranks: 25 s steps, 5 of them all-reduce -> 80 images/s per rank against 100
    (finding,) = scaling_findings(make_store, scaling_pair(125.0, (1.0, 17.0, 5.0)))
    evidence = finding.evidence
    assert evidence["reference_run"] == "one"
    assert evidence["efficiency_percent"] == pytest.approx(80.0)  # 160 of 2 x 100
    anatomy = evidence["attribution"]
    assert anatomy["images_per_second_per_rank"] == pytest.approx(80.0)
    assert anatomy["reference_images_per_second_per_rank"] == pytest.approx(100.0)
    assert anatomy["lost_images_per_second"] == pytest.approx(40.0)
    assert anatomy["lost_fraction_per_rank"] == pytest.approx(0.2)
    parts = {p["part"]: p for p in anatomy["parts"]}
    assert parts["communication"]["lost_images_per_second"] == pytest.approx(40.0)
    assert parts["communication"]["run_seconds"] == pytest.approx(5.0)
    assert parts["compute"]["lost_images_per_second"] == pytest.approx(0.0, abs=1e-9)
    assert anatomy["parts"][0]["part"] == "communication"
    # fabric per step per node: 100 MB/s x 125 s / 5 steps against 0.2 MB/s x 100 s / 5
    assert anatomy["fabric_bytes_per_step"] == pytest.approx(2500 * MB)
    assert anatomy["reference_fabric_bytes_per_step"] == pytest.approx(4 * MB)
    # the measurement replaces the resources' growth: neither is in the finding
    assert "changed" not in evidence and "run_resources" not in evidence
    assert "No measured resource grew" not in finding.explanation
    assert finding.severity == "warning"  # 80%: below the 90% floor
    assert finding.title == (
        "Scaling efficiency 80% on 2 GPUs: 40.0 images/s lost to scaling, "
        "mostly all-reduce (communication)"
    )
    assert "all-reduce (communication) 0 -> 5,000 ms/step: 40.0 images/s" in finding.explanation
    assert "compute (forward + backward) 17,000" not in finding.explanation  # did not grow
    assert "20% fewer" in finding.explanation
    assert "Fabric traffic per step per node: 4.0 MB -> 2.5 GB." in finding.explanation
    assert finding.chart == "communication_percent"


def test_scaling_loss_is_put_on_input_wait_that_grew(make_store):
    # input wait 1 -> 6 s per step: 25 s steps, 80 images/s per rank
    (finding,) = scaling_findings(make_store, scaling_pair(125.0, (6.0, 17.0, 0.0)))
    anatomy = finding.evidence["attribution"]
    assert anatomy["parts"][0]["part"] == "input_wait"
    parts = {p["part"]: p for p in anatomy["parts"]}
    assert parts["input_wait"]["lost_images_per_second"] == pytest.approx(40.0)
    assert parts["communication"]["lost_images_per_second"] == pytest.approx(0.0, abs=1e-9)
    assert finding.title.endswith("mostly input wait")
    assert finding.chart == "input_wait_percent"


def test_scaling_loss_is_put_on_slower_compute_and_what_shrank_offsets(make_store):
    # compute 17 -> 23 s per step while input wait falls 1 -> 0: 25 s steps (+5 s), so
    # compute explains 6/5 of the loss and input wait gives 1/5 back
    (finding,) = scaling_findings(make_store, scaling_pair(125.0, (0.0, 23.0, 0.0)))
    parts = {p["part"]: p for p in finding.evidence["attribution"]["parts"]}
    assert parts["compute"]["lost_images_per_second"] == pytest.approx(48.0)
    assert parts["input_wait"]["lost_images_per_second"] == pytest.approx(-8.0)
    assert finding.title.endswith("mostly compute (forward + backward)")
    assert "Offset by: input wait 1,000 -> 0 ms/step: 8.0 images/s." in finding.explanation
    assert finding.chart == "compute_percent"


def test_scaling_loss_when_nothing_in_the_anatomy_grew_says_so(make_store):
    # the later epoch keeps the reference's pace (20 s steps, the same parts): the 2-rank
    # run's efficiency is lost in its slow epoch 1 (300 s), outside the settled steps
    runs = scaling_pair(100.0, (1.0, 17.0, 0.0), first_epoch_seconds=300.0)
    (finding,) = scaling_findings(make_store, runs)
    evidence = finding.evidence
    assert evidence["efficiency_percent"] == pytest.approx(50.0)  # 40,000 images in 400 s
    # the images/s lost are the scaling table's, ideal - actual over the whole run (200 -
    # 100); the settled steps did not slow down, so no part of the step takes a share
    assert evidence["lost_images_per_second"] == pytest.approx(100.0)
    assert evidence["attribution"]["lost_images_per_second"] == pytest.approx(100.0)
    assert evidence["attribution"]["lost_fraction_per_rank"] == pytest.approx(0.0, abs=1e-9)
    assert all(p["lost_images_per_second"] == 0 for p in evidence["attribution"]["parts"])
    assert finding.severity == "critical"
    assert finding.title == "Scaling efficiency 50% on 2 GPUs: no part of the step grew against one"
    assert "no part of the step (input wait, compute, all-reduce, the rest) grew" in (
        finding.explanation
    )
    assert "changed" not in evidence  # no resource growth offered instead


def test_scaling_loss_silent_when_ranks_keep_their_pace(make_store):
    # 20 s steps on both: 100 images/s per rank, nothing lost
    assert scaling_findings(make_store, scaling_pair(100.0)) == []
    assert scaling_findings(make_store, scaling_pair(125.0, (1.0, 17.0, 5.0)), "one") == []


def test_one_figure_of_images_per_second_lost_in_finding_table_and_dashboard(make_store):
    # epoch 1 of the 2-rank run is slow (200 s) and epoch 2 loses 20% per rank to a longer
    # all-reduce: the settled epochs alone would say 2 x (100 - 80) = 40 images/s lost, the
    # whole run says more. One definition: the scaling table's ideal - actual.
    from collector.queries.query import scaling_table

    runs = scaling_pair(125.0, (1.0, 17.0, 5.0), first_epoch_seconds=200.0)
    store = make_store([p for run in runs for p in run.points()])
    (finding,) = [f for f in run_findings(store, "two") if f.rule == "scaling_loss"]
    table = {r["run_id"]: r for r in json.loads(cli(store, "scaling", "--format", "json"))}
    dashboard = {r["run_id"]: r for r in scaling_table(store)}
    row = table["two"]
    assert row["lost_images_per_second"] == row["ideal"] - row["images_per_second"]
    assert row["lost_images_per_second"] > 40.0 + 1  # more than the settled epochs' loss
    lost = finding.evidence["lost_images_per_second"]
    assert lost == row["lost_images_per_second"] == dashboard["two"]["lost_images_per_second"]
    anatomy = finding.evidence["attribution"]
    assert anatomy["lost_images_per_second"] == lost
    assert anatomy["epochs"] == [2] and anatomy["reference_epochs"] == [2]
    parts = {p["part"]: p for p in anatomy["parts"]}
    assert sum(p["lost_images_per_second"] for p in parts.values()) == pytest.approx(lost)
    assert parts["communication"]["lost_images_per_second"] == pytest.approx(lost)
    assert parts["communication"]["loss_share"] == pytest.approx(1.0)
    assert f"{lost:,.1f} images/s lost to scaling" in finding.title
    assert "(epoch 2; the reference's epoch 2)" in finding.explanation
    assert table["one"]["lost_images_per_second"] == 0.0  # the baseline loses nothing


@pytest.mark.parametrize(
    "unlike",
    [
        {"model": "resnet101"},
        {"image_size": 64},
        {"batch_size": 128},
        {"framework": "mxnet"},
        {"precision": "fp16"},
    ],
    ids=lambda unlike: next(iter(unlike)),
)
def test_scaling_loss_never_compares_unlike_runs(make_store, unlike):
    # the same all-reduce growth as above, but the 2-rank run trains another model, image
    # size, batch per rank, framework or precision: nothing to compare it with
    runs = scaling_pair(125.0, (1.0, 17.0, 5.0), **unlike)
    assert scaling_findings(make_store, runs) == []


def test_scaling_loss_without_an_anatomy_names_the_resources_that_grew(make_store):
    # the same pair with no step anatomy: the finding compares resources instead
    one = RunBuilder("one", steps_per_epoch=STEPS)
    two = RunBuilder("two", ranks_per_host=2, steps_per_epoch=STEPS, t0_ns=T0_NS + DAY)
    for _ in range(2):
        one.epoch(100, 10_000, net_rx=0.1 * MB, net_tx=0.1 * MB)
        two.epoch(125, 10_000, net_rx=50 * MB, net_tx=50 * MB)
    (finding,) = scaling_findings(make_store, [one, two])
    assert "attribution" not in finding.evidence
    assert finding.evidence["changed"][0]["resource"] == "fabric_bytes_per_image"
    assert "Grew against one" in finding.explanation


# --------------------------------------------------------------------------------------
# input wait
# --------------------------------------------------------------------------------------


def input_run(run_id: str, wait: float, cpu_busy: float = 0.3, reads=(0, 0)) -> RunBuilder:
    run = RunBuilder(run_id, steps_per_epoch=5)
    for _ in range(3):
        run.epoch(100, 6400, shares=(wait, 0.9 - wait, 0.0), cpu_busy=cpu_busy, reads=reads)
    return run


def test_input_wait_decode_bound_when_cpus_saturate(make_store):
    store = make_store(input_run("dec", 0.45, cpu_busy=0.95, reads=(0, 50_000_000)).points())
    (finding,) = findings_of(store, "dec", "input_wait")
    assert finding.evidence["cause"] == "decode"
    assert finding.evidence["input_wait_share"] == pytest.approx(0.45)
    assert finding.evidence["epochs"] == [2, 3]  # settled epochs
    assert finding.severity == "warning"
    assert finding.chart == "input_wait_percent"


def test_input_wait_storage_bound_when_the_training_reads_storage(make_store):
    store = make_store(input_run("sto", 0.3, reads=(40_000_000, 50_000_000)).points())
    (finding,) = findings_of(store, "sto", "input_wait")
    assert finding.evidence["cause"] == "storage"
    assert finding.evidence["training_read_bytes"] == 80_000_000  # 2 settled epochs
    assert finding.severity == "info"


def with_training_cpu(run: RunBuilder, share: float) -> list:
    """The run's points, each epoch_end carrying the rank's CPU seconds: ``share`` of the
    host's CPU time (its 8 CPUs over the epoch's 100 s)."""
    from contract.schema import Event, Workload

    points = run.points()
    for point in points:
        if point.fields.get(Workload.EVENT) == Event.EPOCH_END:
            point.fields[Workload.CPU_SECONDS] = share * 8 * 100.0
    return points


def test_input_wait_on_cpus_others_saturated_is_not_decode_bound(make_store):
    """The host's CPUs 95% busy, the training's own processes 20% of them: the loaders
    waited for CPU that others had; decoding is not what saturated them."""
    run = input_run("crowded", 0.45, cpu_busy=0.95, reads=(0, 50_000_000))
    store = make_store(with_training_cpu(run, 0.20))
    assert build_report(store, "crowded").rows[-1].training_cpu_percent == pytest.approx(20.0)
    (finding,) = findings_of(store, "crowded", "input_wait")
    assert finding.evidence["cause"] == "others"
    assert finding.evidence["training_cpu_percent"] == pytest.approx(20.0)
    assert "saturated by other processes than the training's" in finding.explanation
    assert "decode-bound" not in finding.explanation


def test_input_wait_on_cpus_the_training_saturated_is_decode_bound(make_store):
    run = input_run("own", 0.45, cpu_busy=0.95, reads=(0, 50_000_000))
    (finding,) = findings_of(make_store(with_training_cpu(run, 0.90)), "own", "input_wait")
    assert finding.evidence["cause"] == "decode"
    assert "read in all. Decode-bound: decoding and augmenting took all" in finding.explanation


def test_input_wait_silent_below_the_threshold(make_store):
    store = make_store(input_run("fast", 0.1, cpu_busy=0.95).points())
    assert findings_of(store, "fast", "input_wait") == []


# --------------------------------------------------------------------------------------
# stragglers
# --------------------------------------------------------------------------------------


def straggler_run(run_id: str, slow_rank_by_epoch: list[int | None]) -> RunBuilder:
    run = RunBuilder(run_id, hosts=("n1", "n2"), ranks_per_host=1, steps_per_epoch=5)
    for slow in slow_rank_by_epoch:

        def shares(host: str, rank: int, slow=slow) -> tuple[float, float, float]:
            # the others wait for the slow one in the all-reduce: busy 55% against 98%
            return (0.02, 0.93, 0.02) if rank == slow else (0.02, 0.50, 0.45)

        run.epoch(100, 6400, shares=shares)
    return run


def test_the_same_straggler_every_epoch(make_store):
    # 5 of 5 epochs with 2 ranks: by luck 1/2^5 = 3.1%, under 5%: not chance
    store = make_store(straggler_run("slow", [1, 1, 1, 1, 1]).points())
    (finding,) = findings_of(store, "slow", "straggler")
    assert finding.evidence["same_rank"] is True
    hits = finding.evidence["epochs"]
    assert [(h["epoch"], h["rank"], h["host"]) for h in hits] == [
        (epoch, 1, "n2") for epoch in range(1, 6)
    ]
    assert hits[0]["busy_seconds_per_step"] == pytest.approx(0.98 * 20)
    assert hits[0]["others_median_seconds_per_step"] == pytest.approx(0.55 * 20)
    assert hits[0]["slow_part"] == "compute"
    assert finding.evidence["same_rank_chance"] == pytest.approx(1 / 32)
    assert finding.evidence["not_chance"] is True
    assert finding.severity == "warning"
    assert finding.title == "Straggler: rank 1 on n2, slow in compute (forward + backward)"
    assert (
        "The same rank (rank 1 on n2) in 5 of 5 epochs: by chance (1 in 2 ranks each epoch) "
        "that has a probability of 3.1%, so a slow node, device or its data path, not chance."
    ) in finding.explanation


@pytest.mark.parametrize(
    ("slow_by_epoch", "seen", "chance"),
    [([1, 1], "both epochs", "25%"), ([1, 1, 1], "3 of 3 epochs", "12%")],
)
def test_the_same_straggler_in_too_few_epochs_is_worded_as_seen(
    make_store, slow_by_epoch, seen, chance
):
    # issue 42 item 5: two ranks, the same one slowest twice is a coin flip twice
    store = make_store(straggler_run("few", slow_by_epoch).points())
    (finding,) = findings_of(store, "few", "straggler")
    assert finding.evidence["not_chance"] is False
    assert finding.severity == "info"
    assert "not chance." not in finding.explanation
    assert (
        f"Rank 1 on n2 was the slowest in {seen}; too few epochs to say it is not chance "
        f"(by luck, with 2 ranks: {chance}; 3 epochs or more and under 5% are needed)."
    ) in finding.explanation


def test_a_moving_straggler(make_store):
    store = make_store(straggler_run("moving", [0, 1, 0]).points())
    (finding,) = findings_of(store, "moving", "straggler")
    assert finding.evidence["same_rank"] is False
    assert "moving straggler" in finding.explanation


def test_no_straggler_when_ranks_are_alike(make_store):
    store = make_store(straggler_run("even", [None, None]).points())
    assert findings_of(store, "even", "straggler") == []


# --------------------------------------------------------------------------------------
# start-up
# --------------------------------------------------------------------------------------


def startup_run(
    run_id: str, first_seconds: float, first_shares, reads=None, framework: str = "tensorflow"
) -> RunBuilder:
    run = RunBuilder(run_id, steps_per_epoch=5, framework=framework)
    run.epoch(first_seconds, 6400, shares=first_shares, reads=reads)
    run.epoch(100, 6400, shares=(0.02, 0.9, 0.0), reads=(0, 1_000_000) if reads else None)
    run.epoch(100, 6400, shares=(0.02, 0.9, 0.0), reads=(0, 1_000_000) if reads else None)
    return run


def test_startup_from_graph_building(make_store):
    # epoch 1: 300 s, input 2%, compute 30%, other 68% (tracing, compilation)
    store = make_store(startup_run("build", 300, (0.02, 0.3, 0.0)).points())
    (finding,) = findings_of(store, "build", "startup")
    evidence = finding.evidence
    assert evidence["cause"] == "build"
    assert evidence["first_seconds_per_step"] == pytest.approx(60.0)
    assert evidence["settled_seconds_per_step"] == pytest.approx(20.0)
    # per rank over epoch 1: compute 90 - 90 = 0, other 204 - 8 = 196, input 6 - 2 = 4
    assert evidence["extra_seconds_by_part"]["other"] == pytest.approx(196.0)
    assert evidence["extra_seconds_by_part"]["input_wait"] == pytest.approx(4.0)
    assert finding.chart == "compute_percent"
    assert "3.0x" in finding.title


@pytest.mark.parametrize(
    ("framework", "title", "named", "not_named"),
    [
        ("tensorflow", "graph building and XLA compilation", "XLA compilation", "data loader"),
        ("mxnet", "hybridize and graph building", "hybridize", "XLA"),
        (
            "pytorch",
            "eager start-up",
            "data loader workers starting, first-batch allocation, cudnn autotune",
            "graph building",
        ),
        ("custom", "warm-up", "Mostly warm-up (compute", "graph building"),
    ],
)
def test_startup_is_worded_for_the_runs_framework(make_store, framework, title, named, not_named):
    store = make_store(startup_run("fw", 300, (0.02, 0.3, 0.0), framework=framework).points())
    (finding,) = findings_of(store, "fw", "startup")
    assert finding.evidence["framework"] == framework
    assert finding.title == f"Epoch 1 took 3.0x as long per step: {title}"
    assert named in finding.explanation
    assert not_named not in finding.explanation and not_named not in finding.title


def test_startup_from_first_reads(make_store):
    store = make_store(
        startup_run("reads", 300, (0.7, 0.3, 0.0), reads=(500_000_000, 500_000_000)).points()
    )
    (finding,) = findings_of(store, "reads", "startup")
    assert finding.evidence["cause"] == "reads"
    assert finding.evidence["first_read_bytes"] == 500_000_000
    assert finding.evidence["settled_read_bytes"] == 0
    assert finding.chart == "input_wait_percent"


def test_no_startup_when_epoch_1_keeps_pace(make_store):
    store = make_store(startup_run("steady", 110, (0.02, 0.9, 0.0)).points())
    assert findings_of(store, "steady", "startup") == []


# --------------------------------------------------------------------------------------
# the run page's charts
# --------------------------------------------------------------------------------------


def test_stacked_step_time_and_shares_charts(make_store):
    import plotly.graph_objects as go

    from collector.queries.query import epoch_table
    from dashboard import figures

    store = make_store(two_host_run().points())
    rows = epoch_table(store, "cols")
    stacked = figures.step_anatomy_figure(rows, ["n1", "n2"])
    go.Figure(stacked)  # plotly knows every attribute
    assert stacked["layout"]["barmode"] == "stack"
    names = [trace["name"] for trace in stacked["data"]]
    assert names[:3] == ["input wait", "compute", "all-reduce"]
    # n1, epoch 1: 20 s steps (100 s / 5 steps), 30% input wait = 6000 ms, rest 10% = 2000
    assert stacked["data"][0]["x"][0][0] == "n1" and stacked["data"][0]["y"][0] == 6000.0
    assert stacked["data"][3]["y"][0] == pytest.approx(2000.0)
    # hovering a host's bar lists its ranks' parts in ms per step
    from collector.queries.query import rank_step_parts

    ranks = rank_step_parts(store, "cols")
    assert {(r["host"], r["rank"], r["epoch"]) for r in ranks} == {
        (host, rank, epoch) for host, rank in (("n1", 0), ("n1", 1), ("n2", 2), ("n2", 3))
        for epoch in (1, 2)
    }  # fmt: skip
    first = next(r for r in ranks if r["rank"] == 0 and r["epoch"] == 1)
    assert (first["input_wait_ms"], first["compute_ms"]) == (6000.0, 10000.0)
    hovered = figures.step_anatomy_figure(rows, ["n1", "n2"], ranks)
    rest_text = hovered["data"][3]["text"][0]
    assert "rank 0: 6,000 / 10,000 / 2,000 / 2,000" in rest_text and "rank 1:" in rest_text
    empty = figures.step_anatomy_figure(
        [dict(row, seconds_per_step=None) for row in rows], ["n1", "n2"]
    )
    assert "no step anatomy" in str(empty)


def test_shares_of_each_step_pooled_per_host_with_each_ranks(make_store):
    import plotly.graph_objects as go

    from collector.queries.query import epoch_table, step_shares
    from dashboard import figures

    run = RunBuilder("steps", hosts=("n1", "n2"), ranks_per_host=2, steps_per_epoch=2)
    # rank 0 waits 40% for input, rank 1 20%: n1's steps pool to 30%; n2's ranks 10%
    waits = {0: 0.40, 1: 0.20, 2: 0.10, 3: 0.10}
    run.epoch(20, 640, shares=lambda host, rank: (waits[rank], 0.50, 0.25))
    # epoch 2's steps take 2:1 of its 30 s; every rank all-reduces 40% of each
    run.epoch(30, 640, step_pattern=(2.0, 1.0), shares=(0.0, 0.55, 0.40))
    store = make_store(run.points())
    shares = step_shares(store, "steps")
    assert set(shares) == {"n1", "n2"}
    n1 = shares["n1"]
    assert [(p["epoch"], p["step"]) for p in n1] == [(1, 1), (1, 2), (2, 3), (2, 4)]
    assert [p["input_wait_percent"] for p in n1] == [30.0, 30.0, 0.0, 0.0]
    assert [p["communication_percent"] for p in n1] == [25.0, 25.0, 40.0, 40.0]
    assert n1[0]["ranks"] == [
        {"rank": 0, "input_wait_percent": 40.0, "compute_percent": 50.0,
         "communication_percent": 25.0},
        {"rank": 1, "input_wait_percent": 20.0, "compute_percent": 50.0,
         "communication_percent": 25.0},
    ]  # fmt: skip
    assert n1[0]["time_ns"] == T0_NS + 10 * NS  # the first step ends half way into epoch 1
    assert [p["input_wait_percent"] for p in shares["n2"]] == [10.0, 10.0, 0.0, 0.0]
    # one definition: a host's steps of an epoch, pooled, give the epoch's share
    rows = {(r["host"], r["epoch"]): r for r in epoch_table(store, "steps")}
    assert rows[("n1", 1)]["input_wait_percent"] == 30.0
    assert rows[("n1", 2)]["communication_percent"] == 40.0

    figure = figures.step_shares_figure(shares, ["n1", "n2"])
    go.Figure(figure)  # plotly knows every attribute
    assert len(figure["data"]) == 6  # 2 hosts x 3 parts
    assert [t["name"] for t in figure["data"][:3]] == [
        "n1 input wait", "n1 compute", "n1 all-reduce"
    ]  # fmt: skip
    assert figure["data"][0]["y"] == [30.0, 30.0, 0.0, 0.0]
    assert figure["data"][0]["x"][0] == "2023-11-14 22:13:30.000"
    hover = figure["data"][0]["text"][0]
    assert "epoch 1 · step 1" in hover
    assert "rank 0: 40.0 / 50.0 / 25.0" in hover and "rank 1: 20.0 / 50.0 / 25.0" in hover
    # a cap on points per host pools consecutive steps the same way: epoch 2's two steps
    # (20 s and 10 s, every rank 40% all-reduce) and epoch 1's two (30% input wait on n1)
    capped = step_shares(store, "steps", max_points=2)
    assert [(p["step"], p["steps"]) for p in capped["n1"]] == [(2, 2), (4, 2)]
    assert [p["input_wait_percent"] for p in capped["n1"]] == [30.0, 0.0]
    assert capped["n1"][1]["ranks"][0]["communication_percent"] == 40.0
    hover = figures.step_share_hover(capped["n1"][1])
    assert "2 steps to step 4" in hover
    # a run whose steps carry no anatomy
    plain = RunBuilder("plain").epoch(10, 64)
    store = make_store(plain.points())
    assert step_shares(store, "plain") == {}
    assert "no step anatomy" in str(figures.step_shares_figure({}, ["node1"]))


@pytest.mark.parametrize("epochs", [1, 2])
def test_a_one_epoch_run_is_not_explained_as_scaling(make_store, epochs):
    """With one epoch there are no settled epochs: the only epoch carries the start-up, so
    the anatomy would explain start-up as scaling (issue 42 item 6: usage.md's 1-vs-2
    process pair said "mostly the rest of the step" with one epoch, "mostly all-reduce"
    with two). Below the efficiency floor (the scaling table's, timed steps only) the
    one-epoch pair still fires, saying it is not attributed; the two-epoch pair is
    attributed over epoch 2."""
    (finding,) = scaling_findings(make_store, scaling_pair(125.0, epochs=epochs))
    assert finding.title.startswith("Scaling efficiency 80% on 2 GPUs")
    assert finding.evidence.get("start_up_only", False) is (epochs == 1)
    if epochs == 1:
        assert "attribution" not in finding.evidence and "changed" not in finding.evidence
        assert finding.title.endswith(": one epoch, start-up included, not attributed")
        assert "the loss includes start-up" in finding.explanation
        assert "Run both for 2 epochs or more to attribute it" in finding.explanation
    else:
        assert finding.evidence["attribution"]["start_up_included"] is False
        assert "the epochs after the first" in finding.explanation
        assert ", mostly the rest of the step" in finding.title


OVER = (
    "more than the link carries, so the wait was not the whole transfer. "
    "At the link's rate the gradients need at least 12,500 ms per step"
)
UNSURE = "overlap, not only bandwidth, may explain the share; the link is not shown to bound"


@pytest.mark.parametrize(
    ("peer_mbps", "share", "compute", "verdict"),
    [
        (2500.0, 10, 17.0, "under the 80% that would mean bandwidth: not bandwidth; latency"),
        # 5 s of wait beside 1 s of compute: even behind all of it, 83% of the link
        (250.0, 100, 1.0, "100% of the fabric's measured 250 MB/s (agent ceilings): bandwidth-"),
        # beside 17 s of compute the transfer may have taken 22 s: 18% of the link
        (312.5, 80, 17.0, "would mean bandwidth if the wait were the whole transfer. Had it "),
        # 1,250 MB per step need 12.5 s at 100 MB/s: the wait of 5 s was not all of it
        (100.0, 250, 1.0, OVER + "; the rest ran behind backward, in compute's time: the link"),
        # ... and had it run behind 17 s of compute too, 57% of the link
        (100.0, 250, 17.0, OVER + ". Had it run behind the whole of compute too"),
    ],
)
def test_the_all_reduce_is_worded_against_the_fabrics_measured_ceiling(
    make_store, peer_mbps, share, compute, verdict
):
    """The 2-rank run's NIC moves 50 MB/s each way: over epoch 2's 125 s, 6,250 MB of
    gradients per node, 1,250 MB per step, in a 5 s all-reduce wait per step: 250 MB/s
    against the peer throughput agent ceilings measured (stored as the sampler reports it).
    That rate is an upper bound: bandwidth-bound needs the rate had the all-reduce run
    behind the whole of ``compute`` too (its least) at the 80% as well."""
    from contract.point import Point
    from contract.schema import Ceiling, Tag

    runs = scaling_pair(125.0, (1.0, compute, 5.0))
    peer = [
        Point(
            Ceiling.NAME,
            {Tag.HOST: "node1", Tag.DEVICE: "node2:5291", Tag.KIND: "net", Tag.METHOD: "tcp"},
            {str(Ceiling.PEER_THROUGHPUT): peer_mbps * MB, str(Ceiling.MEASURED_AT): 1.0},
            T0_NS + DAY + second * NS,
        )
        for second in range(-5, 300, 5)
    ]
    store = make_store([p for run in runs for p in run.points()] + peer)
    (finding,) = [f for f in run_findings(store, "two") if f.rule == "scaling_loss"]
    anatomy = finding.evidence["attribution"]
    assert anatomy["allreduce_bytes_per_second"] == pytest.approx(250 * MB, rel=0.01)
    assert anatomy["fabric_ceiling_bytes_per_second"] == pytest.approx(peer_mbps * MB)
    assert anatomy["allreduce_ceiling_percent"] == pytest.approx(share, abs=0.2)
    assert (
        f"While the ranks waited on it, the all-reduce moved 250 MB/s per node, {share}% of "
        "the fabric's measured"
    ) in finding.explanation
    print(finding.explanation)
    assert verdict in finding.explanation
    least = anatomy["allreduce_ceiling_least_percent"]
    assert least == pytest.approx(share * 5 / (5 + compute), abs=0.2)
    assert ("bandwidth-bound" in finding.explanation) is (share >= 80 and least >= 80)
    assert (UNSURE in finding.explanation) is (share >= 80 and least < 80)
    # without a measured ceiling the finding says nothing of the link
    (plain,) = scaling_findings(make_store, scaling_pair(125.0, (1.0, 17.0, 5.0)))
    assert "allreduce_ceiling_percent" not in plain.evidence["attribution"]
    assert "While the ranks waited on it" not in plain.explanation


def test_first_step_wait_share_is_the_wait_outside_aus_steps():
    """A profiled rank's epoch: 1.0 s of its 1.3 s of input wait fell in the first step,
    which AU leaves out (AU's 9 s of steps idled 0.3 s). An emulated accelerator idles more
    than it waits for input (DLIO's sleep), which leaves nothing outside; a run whose AU is
    over every step (the bundled workloads' settled epochs) has no first step apart."""
    from collector.analysis.anatomy import RankEpoch
    from collector.findings.input import first_step_wait_share

    def epoch(input_wait: float, au_seconds: float, au_idle: float) -> RankEpoch:
        return RankEpoch("n1", 0, 2, 10, 10.0, input_wait, 8.0, 0.0, 10.0 - 8.0 - input_wait,
                         None, 80.0, 80.0, 10.0, None, None,
                         timed_busy=au_seconds - au_idle, au_seconds=au_seconds)  # fmt: skip

    assert first_step_wait_share([epoch(1.3, 9.0, 0.3)]) == pytest.approx(1.0 / 1.3)
    assert first_step_wait_share([epoch(1.3, 9.0, 2.0)]) == 0.0  # emulated: idle > wait
    assert first_step_wait_share([epoch(1.3, 10.0, 1.3)]) is None  # AU over every step
    assert first_step_wait_share([replace(epoch(1.3, 9.0, 0.3), timed_busy=None)]) is None

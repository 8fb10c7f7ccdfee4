"""Screenshots of every dashboard page, from headless Chromium, for the docs.

    python bench/dashboard/screenshots.py [--out docs/screenshots]
    python bench/dashboard/screenshots.py --db runs/RUN.sqlite --pages run --prefix demo-
    python bench/dashboard/screenshots.py --db runs/infer-pt-small.sqlite --pages inference

Builds a demo store through the real SQLite store's write path, serves the dashboard on
127.0.0.1 and saves runs.png, run.png, scaling.png, findings.png and inference-v100.png.

The demo is the seed studies' setting, made up with ``tests.support.run_builder`` (no cluster here):
ResNet-50 with Horovod+TensorFlow on 4 nodes x 4 GPUs, the data set (144 GB) on NFS over
InfiniBand. Epoch 1 (450 s) reads it from the server at about 320 MB/s per node while the page
cache fills, with iowait and uneven steps; the four later 300-s epochs read nothing from the
server and run 1.5x faster. Three more runs of the same group (1 GPU, 4 GPUs on one node,
8 GPUs on two nodes) fill the scaling page; all reach top-1 0.749 in their fifth epoch.
Every run splits its steps as a GPU cluster's would: the same 827 ms of forward and
backward per 256-image step everywhere, the all-reduce growing with the GPUs (0 on one
GPU, 150 ms on 16), and in the 16-GPU run's epoch 1 a third of each step waiting for input
from NFS. An inference run (``workloads infer``'s events) fills the Inference page with the
study's section V comparison on a V100 (TensorRT, FP32 against INT8, batch 1 to 64).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from werkzeug.serving import make_server  # noqa: E402

from collector.store import SqliteStore  # noqa: E402
from dashboard import ids  # noqa: E402
from dashboard.app import create_app  # noqa: E402
from dashboard.source import DataSource  # noqa: E402
from tests.support.browser import chrome_driver  # noqa: E402
from tests.support.run_builder import NS, T0_NS, RunBuilder  # noqa: E402

DEMO_RUN = "resnet50-hvd-16gpu"
INFERENCE_RUN = "resnet50-trt-v100"
IMAGES_PER_EPOCH = 1_280_000
TOP1 = (0.36, 0.55, 0.66, 0.72, 0.752)
HOURS = 3600 * NS
# page -> (its address, {run}: the run pictured; what must be drawn before the picture)
PAGES = {
    "runs": ("/", f"#{ids.RUNS_LIST}"),
    "run": ("/runs/{run}", f"#{ids.RUN_FINDINGS} .finding"),
    "scaling": ("/scaling", f"#{ids.SCALING_GRAPH} .main-svg"),
    "findings": ("/findings?run={run}", ".finding"),
    # the modelled V100's; inference.png in the README is a real CPU run's page (--db its
    # store --pages inference)
    "inference-v100": (f"/inference?run={INFERENCE_RUN}", f"#{ids.INFERENCE_GRAPH} .main-svg"),
    "inference": ("/inference?run={run}", f"#{ids.INFERENCE_GRAPH} .main-svg"),
}
MODELLED_PAGES = ("runs", "run", "scaling", "findings", "inference-v100")


COMPUTE_SECONDS = 0.827  # forward + backward of one 256-image ResNet-50 step on a V100


def step_shares(step_seconds: float, communication_seconds: float) -> tuple[float, float, float]:
    """(input wait, compute, communication) shares of a step: compute the same on every GPU,
    2% of the step for the rest (update, callbacks), the remainder waiting for input."""
    compute = COMPUTE_SECONDS / step_seconds
    communication = communication_seconds / step_seconds
    return (1.0 - compute - communication - 0.02, compute, communication)


def demo_run() -> RunBuilder:
    hosts = ("node1", "node2", "node3", "node4")
    builder = RunBuilder(
        DEMO_RUN,
        hosts=hosts,
        ranks_per_host=4,
        steps_per_epoch=300,
        cpus=40,
        batch_size=256,
        dataset_bytes=144_000_000_000,
        target_top1=0.749,
        skew_s={"node3": 0.4},
    )
    nfs = {host: rate for host, rate in zip(hosts, (330e6, 315e6, 322e6, 309e6), strict=True)}
    per_rank = IMAGES_PER_EPOCH // 16
    builder.epoch(
        450,
        per_rank,
        step_pattern=(1.0, 1.6, 0.7, 1.3, 0.8, 1.9),
        top1=TOP1[0],
        shares=step_shares(450 / 300, 0.150),
        nfs_server_read=nfs,
        nfs_app_read=nfs,
        ib_rcv={host: 150e6 + rate for host, rate in nfs.items()},
        ib_xmit=150e6,
        net_rx=2e6,
        net_tx=2e6,
        cache_growth=nfs,
        cpu_busy=0.32,
        cpu_iowait=0.17,
        gpu_util=58.0,
    )
    for top1 in TOP1[1:]:
        builder.epoch(
            300,
            per_rank,
            top1=top1,
            shares=step_shares(300 / 300, 0.150),
            nfs_app_read=480e6,
            ib_rcv=150e6,
            ib_xmit=150e6,
            net_rx=2e6,
            net_tx=2e6,
            cpu_busy=0.55,
            cpu_iowait=0.005,
            gpu_util=94.0,
        )
    return builder


def scaling_runs() -> list[RunBuilder]:
    """The same group on fewer GPUs: events only (no samples), 5 epochs each."""
    out = []
    shapes = (
        ("hvd-1gpu", 1, 1, 300.0, 0.0),
        ("hvd-4gpu", 1, 4, 1140.0, 0.045),
        ("hvd-8gpu", 2, 4, 2208.0, 0.080),
    )
    for index, (run_id, nodes, ranks, rate, all_reduce) in enumerate(shapes):
        builder = RunBuilder(
            run_id,
            hosts=tuple(f"node{n + 1}" for n in range(nodes)),
            ranks_per_host=ranks,
            t0_ns=T0_NS - (3 - index) * 24 * HOURS,
            batch_size=256,
            steps_per_epoch=IMAGES_PER_EPOCH // (nodes * ranks * 256),
            target_top1=0.749,
            write_samples=False,
        )
        step_seconds = 256 / (rate / (nodes * ranks))
        for top1 in TOP1:
            builder.epoch(
                IMAGES_PER_EPOCH / rate,
                IMAGES_PER_EPOCH // (nodes * ranks),
                top1=top1,
                shares=step_shares(step_seconds, all_reduce),
            )
        out.append(builder)
    return out


# (precision, batch size): images/s of ResNet-50 under TensorRT on one V100, and top-1
INFERENCE_RATES = {
    ("fp32", 1): 412.0,
    ("int8", 1): 1_180.0,
    ("fp32", 8): 1_010.0,
    ("int8", 8): 3_560.0,
    ("fp32", 32): 1_190.0,
    ("int8", 32): 4_420.0,
    ("fp32", 64): 1_230.0,
    ("int8", 64): 4_610.0,
}
INFERENCE_TOP1 = {"fp32": 0.7611, "int8": 0.7598}
TIMED_BATCHES = 20


def inference_points() -> list:
    """A finished ``workloads infer`` run, its events written as the command writes them."""
    from contract.schema import INFERENCE_FRAMEWORK, Event, RunState, Workload
    from workloads.record.events import EventWriter, MemorySink

    sink = MemorySink()
    start = T0_NS + 2 * HOURS
    clock = iter(range(start, start + 10**13, 10**9))
    writer = EventWriter(sink, INFERENCE_RUN, 0, INFERENCE_FRAMEWORK, host="node1",
                         clock_ns=lambda: next(clock))  # fmt: skip
    writer.emit(Event.RUN_START, {
        Workload.MODEL: "resnet50", Workload.BATCH_SIZE: 64, Workload.WORLD_SIZE: 1,
        Workload.IMAGE_SIZE: 224, Workload.PRECISION: "fp32,int8",
        Workload.EXECUTION_PROVIDER: "TensorrtExecutionProvider", Workload.INT8_FORMAT: "qdq",
        Workload.WEIGHTS: f"runs/{DEMO_RUN}/checkpoint.pt (epoch 5)",
        Workload.VALIDATION_IMAGES: 50_000, Workload.CALIBRATION_IMAGES: 64,
    })  # fmt: skip
    for (precision, batch_size), rate in INFERENCE_RATES.items():
        images = batch_size * TIMED_BATCHES
        writer.emit(Event.INFERENCE, {
            Workload.PRECISION: precision, Workload.BATCH_SIZE: batch_size,
            Workload.TIMED_IMAGES: images, Workload.TIMED_SECONDS: images / rate,
            Workload.LATENCY_P50_SECONDS: batch_size / rate,
            Workload.LATENCY_P90_SECONDS: 1.08 * batch_size / rate,
            Workload.LATENCY_P99_SECONDS: 1.25 * batch_size / rate,
            Workload.TOP1: INFERENCE_TOP1[precision],
        })  # fmt: skip
    writer.emit(Event.RUN_END, {Workload.STATE: RunState.FINISHED})
    return sink.points


def build_demo_store(path: Path) -> SqliteStore:
    store = SqliteStore(path)
    for builder in [*scaling_runs(), demo_run()]:
        store.write_points(builder.points())
    store.write_points(inference_points())
    return store


def page_height(driver) -> int:
    """Down to the end of the page's content (not the window's, which may be taller)."""
    return driver.execute_script(
        f"const page = document.getElementById('{ids.PAGE}').getBoundingClientRect();"
        "return Math.ceil(page.bottom + window.scrollY + 24);"
    )


def full_page(driver, path: Path) -> None:
    """The whole page in one picture: the window is grown to the page's height until that
    stops changing (plotly lays its figures out again after each resize, and a page can
    grow when it does)."""
    height = 0
    for _ in range(6):
        wanted = min(max(page_height(driver), 400), 6000)
        viewport = driver.execute_script("return window.innerHeight")
        if wanted == height and viewport >= wanted:
            break
        # the window's height holds more than the page's viewport (headless Chromium too)
        window = driver.get_window_size()["height"]
        driver.set_window_size(1400, wanted + max(window - viewport, 0))
        height = wanted
        time.sleep(0.8)  # plotly relayout after the resize
    driver.save_screenshot(str(path))
    small_png(path)


def small_png(path: Path) -> None:
    """256 colours, no dithering: the same picture (flat colours, anti-aliased text) in
    about 40% of the bytes, for the repository."""
    from PIL import Image

    with Image.open(path) as picture:
        flat = picture.convert("RGB").quantize(
            colors=256, method=Image.Quantize.MEDIANCUT, dither=Image.Dither.NONE
        )
    flat.save(path, optimize=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "screenshots")
    parser.add_argument(
        "--db",
        type=Path,
        help="screenshot this store (e.g. make demo's runs/RUN.sqlite) instead of the modelled one",
    )
    parser.add_argument("--run", help="the run of the run and findings pages (default: newest)")
    parser.add_argument(
        "--pages",
        default=",".join(MODELLED_PAGES),
        help=f"which of {', '.join(PAGES)} (default: %(default)s)",
    )
    parser.add_argument("--prefix", default="", help="file names: PREFIX<page>.png")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        if args.db is not None:
            store = SqliteStore(args.db)
        else:
            store = build_demo_store(Path(tmp) / "epochscope.sqlite")
        newest = max(store.runs(), key=lambda run: run.start_ns).run_id
        run_id = args.run or (DEMO_RUN if args.db is None else newest)
        source = DataSource(store)
        source.prepare(run_id)  # the run page comes whole, as a computed run's does
        app = create_app(source)
        server = make_server("127.0.0.1", 0, app.server, threaded=True)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        base = f"http://127.0.0.1:{server.server_port}"
        driver = chrome_driver()
        try:
            from selenium.webdriver.common.by import By
            from selenium.webdriver.support import expected_conditions as ec
            from selenium.webdriver.support.ui import WebDriverWait

            for name in args.pages.split(","):
                url, ready = PAGES[name]
                url = url.format(run=run_id)
                driver.set_window_size(1400, 1000)
                driver.get(base + url)
                WebDriverWait(driver, 30).until(
                    ec.presence_of_element_located((By.CSS_SELECTOR, ready))
                )
                time.sleep(1.0)
                path = args.out / f"{args.prefix}{name}.png"
                full_page(driver, path)
                print(f"saved {path}")
            errors = driver.get_log("browser")
            if errors:
                print("browser console errors:", errors, file=sys.stderr)
                return 1
        finally:
            driver.quit()
            server.shutdown()
            store.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())

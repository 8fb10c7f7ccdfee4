"""What drawing the run page's time-series chart costs Chromium, by what the figure holds.

    python bench/dashboard/chart_cost.py [--db PATH] [--rounds 5] [--painted]

Serves the benchmark's store (``make_store.py``, built on first use as by
``bench_run_page.py``), opens the run's page in headless Chromium, then draws copies of its
time-series figure with ``Plotly.newPlot`` into a fresh div of the page (1,200 px wide), one
variant after the other, ``--rounds`` times round-robin (a shared machine's load falls on
every variant alike), and prints each variant's median milliseconds:

- ``as shipped``: 104 traces (13 series x 8 hosts), ~457 points each, the epochs' shading;
- ``traces N``: the first N traces only (0: the axes, shapes and annotations alone);
- ``1/5 of the points``: every 5th bucket of each trace (``dx`` x 5): what a coarser
  down-sample would draw;
- ``no shapes`` / ``no annotations``: without the epochs' shading / the panels' titles;
- ``solid lines`` / ``lines 1 px`` / ``no hover template`` / ``no legend groups``: each
  trace without its dash pattern, with a 1 px line instead of 1.6 px, hovered by name
  instead of its template, outside its host's legend group;
- with ``--webgl`` (the page's plotly.js replaced by plotly.py's full bundle of the same
  version, which has WebGL traces; every variant then draws with it): ``scattergl``, every
  trace drawn by WebGL (in the tests' headless Chromium: SwiftShader, on the CPU), and
  ``one trace per series``, the hosts of each panel's series joined into one trace (gaps
  between hosts; one colour: what SVG's one line colour per trace leaves), as lines
  (``... lines``), as markers coloured per point by host (``... markers``) and as such
  markers drawn by WebGL (``... markers gl``).

Timed until ``newPlot``'s promise resolves (plotly.js's work), or with ``--painted`` until
two animation frames later (the frame that shows it: style, layout and paint too).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import make_store  # noqa: E402
from bench_run_page import DEFAULT_DB, PAGE_READY, chrome_driver  # noqa: E402
from werkzeug.serving import make_server  # noqa: E402

from collector.store import SqliteStore  # noqa: E402
from dashboard import ids  # noqa: E402
from dashboard.app import create_app  # noqa: E402
from dashboard.source import DataSource  # noqa: E402

VARIANTS: dict[str, dict[str, object]] = {
    "as shipped": {},
    "traces 0": {"traces": 0},
    "traces 13": {"traces": 13},
    "traces 52": {"traces": 52},
    "1/5 of the points": {"every": 5},
    "no shapes": {"no_shapes": True},
    "no annotations": {"no_annotations": True},
    "solid lines": {"solid": True},
    "lines 1 px": {"thin": True},
    "no hover template": {"no_hover_template": True},
    "no legend groups": {"no_legend_groups": True},
}
WEBGL_VARIANTS: dict[str, dict[str, object]] = {
    "scattergl": {"gl": True},
    "one trace per series lines": {"merge": "lines"},
    "one trace per series markers": {"merge": "markers"},
    "one trace per series markers gl": {"merge": "markers", "gl": True},
}
DRAW = f"""
const done = arguments[arguments.length - 1];
const variant = arguments[0];
const shown = document.querySelector('#{ids.TIMESERIES_GRAPH} .js-plotly-plot');
let data = JSON.parse(JSON.stringify(shown.data));
const layout = JSON.parse(JSON.stringify(shown.layout));
if (variant.traces !== undefined) data = data.slice(0, variant.traces);
if (variant.every) data.forEach(t => {{
    if (t.dx) {{ t.y = t.y.filter((_, i) => i % variant.every === 0); t.dx *= variant.every; }}
}});
if (variant.no_shapes) layout.shapes = [];
if (variant.no_annotations) layout.annotations = [];
data.forEach(t => {{
    if (variant.solid && t.line) t.line.dash = 'solid';
    if (variant.thin && t.line) t.line.width = 1;
    if (variant.no_hover_template) {{ delete t.hovertemplate; t.hoverinfo = 'y+name'; }}
    if (variant.no_legend_groups) delete t.legendgroup;
}});
if (variant.merge) {{
    // one trace per (axes, dash): the hosts of a panel's series end to end, x in ms
    const groups = new Map();
    data.forEach(t => {{
        const key = [t.xaxis, t.yaxis, t.line && t.line.dash, t.x ? 'x' : 'dx'].join('|');
        if (!groups.has(key)) groups.set(key, []);
        groups.get(key).push(t);
    }});
    data = Array.from(groups.values(), traces => {{
        const x = [], y = [], colour = [];
        traces.forEach(t => {{
            const start = t.x ? null : Date.parse(t.x0.replace(' ', 'T') + 'Z');
            t.y.forEach((v, i) => {{
                x.push(t.x ? t.x[i] : start + i * t.dx);
                y.push(v);
                colour.push(t.line.color);
            }});
            x.push(null); y.push(null); colour.push(t.line.color);
        }});
        const merged = {{type: 'scatter', x, y, xaxis: traces[0].xaxis,
                         yaxis: traces[0].yaxis, hovertemplate: traces[0].hovertemplate}};
        if (variant.merge === 'lines') {{ merged.mode = 'lines'; merged.line = traces[0].line; }}
        else {{ merged.mode = 'markers'; merged.marker = {{color: colour, size: 3}}; }}
        return merged;
    }});
}}
if (variant.gl) data.forEach(t => {{ t.type = 'scattergl'; }});
const div = document.createElement('div');
div.style.width = '1200px';
document.body.appendChild(div);
const started = performance.now();
const finish = () => {{
    const spent = performance.now() - started;
    Plotly.purge(div);
    div.remove();
    done(spent);
}};
Plotly.newPlot(div, data, layout, {{displayModeBar: false}}).then(() => {{
    if (variant.painted) requestAnimationFrame(() => requestAnimationFrame(finish));
    else finish();
}});
"""

WEBGL_RENDERER = """
const gl = document.createElement('canvas').getContext('webgl');
if (!gl) return 'none';
const info = gl.getExtension('WEBGL_debug_renderer_info');
return info ? gl.getParameter(info.UNMASKED_RENDERER_WEBGL) : 'unnamed';
"""


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--db", type=Path, default=DEFAULT_DB)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--painted", action="store_true", help="time until the frame is painted")
    parser.add_argument(
        "--webgl",
        action="store_true",
        help="plotly.py's full bundle; adds the WebGL and one-trace-per-series variants",
    )
    args = parser.parse_args()
    variants = {**VARIANTS, **(WEBGL_VARIANTS if args.webgl else {})}
    if not args.db.exists():
        print(f"building {args.db} (8 hosts x 3 h) ...")
        make_store.build(args.db)
    source = DataSource(SqliteStore(args.db))
    server = make_server("127.0.0.1", 0, create_app(source).server, threaded=True)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    driver = chrome_driver()
    driver.set_script_timeout(120)
    spent: dict[str, list[float]] = {name: [] for name in variants}
    try:
        driver.get(f"http://127.0.0.1:{server.server_port}/runs/{make_store.RUN_ID}")
        deadline = time.monotonic() + 120
        while driver.execute_script(PAGE_READY) is None:
            if time.monotonic() > deadline:
                raise TimeoutError("the run page was not drawn in 120 s")
            time.sleep(0.1)
        if args.webgl:  # the same plotly.js version, with every trace type
            from plotly.offline import get_plotlyjs

            driver.execute_script(get_plotlyjs() + "\n;window.Plotly = Plotly;")
            print("WebGL renderer:", driver.execute_script(WEBGL_RENDERER))
        driver.execute_async_script(DRAW, {})  # (a first draw warms plotly.js up)
        for _ in range(args.rounds):
            for name, variant in variants.items():
                spent[name].append(
                    driver.execute_async_script(DRAW, {**variant, "painted": args.painted})
                )
    finally:
        driver.quit()
        server.shutdown()
    print(f"load average at the end: {os.getloadavg()[0]:.2f}")
    for name, times in spent.items():
        each = ", ".join(f"{t:.0f}" for t in times)
        print(f"{name:20} {statistics.median(times):6.0f} ms  ({each})")
    return 0


if __name__ == "__main__":
    sys.exit(main())

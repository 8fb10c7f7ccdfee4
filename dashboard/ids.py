"""Every id the dashboard gives a component, named once.

The pages (``pages.py``) give these ids to components, the callbacks (``app.py``) listen to
and write them, and the browser tests and the benchmark scripts look elements up by them
(``"#" + ids.TIMESERIES_GRAPH``). Ids that are also anchors in a run page's URL
(``/runs/<id>#over-time``, linked from findings) are marked so: renaming one breaks links
people kept.

The dashboard has no pattern-matching ids (``{"type": ..., "index": ...}``); a page that
needs them names their types here too.
"""

from __future__ import annotations

# -- the layout every page sits in ---------------------------------------------------------
URL = "url"  # dcc.Location
NAV = "nav"
PAGE = "page"
SCROLL_DONE = "scroll-done"  # the URL whose #anchor was scrolled to

# -- runs page -----------------------------------------------------------------------------
RUNS_TABLE = "runs-table"  # the container the refresh callback rewrites
RUNS_LIST = "runs-list"  # the table inside it
RUNS_INTERVAL = "runs-interval"
RUNS_DIGEST = "runs-digest"

# -- a run page opened before its run is in the store --------------------------------------
RUN_WAITING = "run-waiting"
RUN_WAIT_ID = "run-wait-id"
RUN_WAIT_INTERVAL = "run-wait-interval"

# -- run page ------------------------------------------------------------------------------
RUN_HEADER = "run-header"
RUN_STATUS = "run-status"
RUN_FINDINGS = "run-findings"
EPOCH_STORAGE = "epoch-storage"  # anchor: the disk and NFS bars
EPOCH_FABRIC = "epoch-fabric"  # anchor: the fabric bars' panel
ABSENT_NOTE = "absent-note"  # what the hosts do not have, whose charts are left out
EPOCH_DISK_PANEL = "epoch-disk-panel"  # hidden when no host has a local disk
EPOCH_NFS_PANEL = "epoch-nfs-panel"  # hidden when no host has an NFS mount
EPOCH_DISK_GRAPH = "epoch-disk"
EPOCH_NFS_GRAPH = "epoch-nfs"
EPOCH_FABRIC_GRAPH = "epoch-fabric-graph"
EPOCH_STEP_ANATOMY_GRAPH = "epoch-step-anatomy"
STEP_ANATOMY = "step-anatomy"  # anchor: "Where step time goes"
STEP_SHARES_GRAPH = "step-shares"
STEP_SHARES_SLOT = "step-shares-slot"  # holds the graph once the steps are read
STEP_ANATOMY_NOTE = "step-anatomy-note"  # why the section is empty, when it is
STEP_ANATOMY_PANELS = "step-anatomy-panels"
OVER_TIME = "over-time"  # anchor: "Over time"
BUCKET_NOTE = "bucket-note"
TIMESERIES_GRAPH = "timeseries"
TIMESERIES_SLOT = "timeseries-slot"  # holds the graph once its data is computed
EPOCH_TABLE = "epoch-table"  # anchor: "Per-epoch table"
EPOCH_TABLE_HOSTS = "epoch-table-hosts"  # the "one row per host" switch
EPOCH_TABLE_CONTAINER = "epoch-table-container"
RUN_INTERVAL = "run-interval"
RUN_LIVE = "run-live"  # what a live page sends back on each poll
# the run, its epochs' state and whether the page came with its findings: the findings
# callback's input
RUN_EPOCHS = "run-epochs"
RUN_PENDING = "run-pending"  # a finished run: its time series and step shares come after

# -- scaling page --------------------------------------------------------------------------
SCALING_RUNS = "scaling-runs"
SCALING_GRAPH = "scaling-graph"
ACCURACY_CHART = "accuracy-chart"  # the panel, hidden when no run reached its target
ACCURACY_GRAPH = "accuracy-graph"
SCALING_TABLE = "scaling-table"  # the container the selection callback rewrites
SCALING_LIST = "scaling-list"  # the table inside it
SCALING_NOTE = "scaling-note"  # why some efficiencies are missing
FORECAST_SECTION = "forecast-section"
FORECAST_RUN = "forecast-run"  # the run the forecast is made from
FORECAST_BODY = "forecast-body"  # the container the run's choice rewrites
FORECAST_LABEL = "forecast-label"  # FORECAST and the error measured on real runs
FORECAST_GRAPH = "forecast-graph"
FORECAST_TABLE = "forecast-table"
FORECAST_REQUIREMENTS = "forecast-requirements"
FORECAST_NOTE = "forecast-note"  # why no forecast could be made

# -- findings page (and the findings on run and inference pages) ---------------------------
FINDINGS_RUN = "findings-run"
FINDINGS_BODY = "findings-body"
FINDING_PREFIX = "finding-"  # anchor: one finding's card, ``finding(rule)``

# -- inference page ------------------------------------------------------------------------
INFERENCE_RUN = "inference-run"
INFERENCE_BODY = "inference-body"
INFERENCE_SETUP = "inference-setup"
INFERENCE_GRAPH = "inference-graph"
INFERENCE_TABLE = "inference-table"
INFERENCE_ACCURACY = "inference-accuracy"
INFERENCE_TOP1_DIFFERENCE = "inference-top1-difference"

# -- jobs page and a job's page ------------------------------------------------------------
JOBS_LIST = "jobs-list"  # the table of every job
JOB_HEADER = "job-header"
JOB_NODES = "job-nodes"  # anchor: the per-node table (job findings point here)
JOB_NEIGHBOURS = "job-neighbours"
JOB_FINDINGS = "job-findings"
JOB_RUNS = "job-runs"  # anchor: the job's runs, each linking to its run page


def finding(rule: str) -> str:
    """The id of the card of a finding by ``rule`` (a findings rule's name)."""
    return FINDING_PREFIX + rule

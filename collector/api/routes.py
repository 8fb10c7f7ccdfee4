"""The read API's paths and the options a query may carry."""

PREFIX = "/api/v1/"
VIEWS = ("runs", "report", "scaling", "inference", "jobs", "job", "hosts", "forecast", "compare")
DASHBOARD = "dashboard/"  # /api/v1/dashboard/<question>: collector.queries.questions
# options of the local commands that name the local store or the remote one: never sent
LOCAL_ONLY = frozenset(
    {
        "command",
        "db",
        "backend",
        "backend_auth_file",
        "collector",
        "token_file",
        "ca_file",
        "throughput",
        "db_b",
        "fail_if_slower",  # compare's exit status: the command line's, not a view's
    }
)
CONTENT_TYPES = {"json": "application/json; charset=utf-8", "csv": "text/csv; charset=utf-8"}

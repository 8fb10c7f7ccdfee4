"""Fetch plotly.js's basic bundle into ``dashboard/assets/`` from the npm registry.

The dashboard draws only scatter and bar charts: plotly.js's basic bundle (1.2 MB) has
them, against the full bundle's 4.8 MB that dcc.Graph fetches when a page has no
``window.Plotly``. Dash serves every file in ``assets/``, so once fetched it is on every
page; without it the pages fall back to the full bundle and work the same.

The bundle is fetched (``make env`` runs ``python -m dashboard.fetch_bundle``), not kept in
git: the version and the npm registry's sha512 are pinned here, and the version must be
the plotly.js that plotly.py carries (the figures are written for it).
"""

from __future__ import annotations

import base64
import hashlib
import io
import sys
import tarfile
import urllib.request
from pathlib import Path

PACKAGE = "plotly.js-basic-dist-min"
VERSION = "4.1.1"
INTEGRITY = (  # npm's dist.integrity of the tarball
    "sha512-1oNF8PeQx2hv/y7tqEVWKD3JGwn/MGEMQ8mL9HUwsaqG9FGy/"
    "OU5FHUHvzqbqxN4mnwZGI9abTiE775C4kkjMQ=="
)
TARBALL = f"https://registry.npmjs.org/{PACKAGE}/-/{PACKAGE}-{VERSION}.tgz"
ASSETS = Path(__file__).parent / "assets"
BUNDLE = ASSETS / "plotly-basic.min.js"
LICENSE = ASSETS / "plotly-basic.LICENSE.txt"
TIMEOUT_SECONDS = 120


def integrity_of(data: bytes) -> str:
    """npm's ``dist.integrity`` of a tarball: sha512, base64."""
    return "sha512-" + base64.b64encode(hashlib.sha512(data).digest()).decode()


def bundle_files(tarball: bytes) -> tuple[bytes, bytes]:
    """The minified bundle and its licence out of the package's tarball."""
    with tarfile.open(fileobj=io.BytesIO(tarball), mode="r:gz") as archive:
        files = []
        for name in ("package/plotly-basic.min.js", "package/LICENSE"):
            member = archive.extractfile(name)
            if member is None:
                raise ValueError(f"{PACKAGE}-{VERSION}.tgz has no {name}")
            files.append(member.read())
    return files[0], files[1]


def fetch(plotly_js_version: str) -> str:
    """Write the bundle unless it is there already; what was done, in words."""
    if plotly_js_version != VERSION:
        raise ValueError(
            f"plotly.py carries plotly.js {plotly_js_version}, this pins {VERSION}: "
            f"set VERSION and INTEGRITY in {__file__} to npm's {PACKAGE}@{plotly_js_version}"
        )
    if BUNDLE.exists() and f"v{VERSION}" in BUNDLE.read_text(errors="replace")[:200]:
        return f"{BUNDLE} is plotly.js {VERSION} already"
    with urllib.request.urlopen(TARBALL, timeout=TIMEOUT_SECONDS) as response:
        tarball = response.read()
    if integrity_of(tarball) != INTEGRITY:
        raise ValueError(f"{TARBALL}: its sha512 is not the pinned one; nothing written")
    bundle, licence = bundle_files(tarball)
    ASSETS.mkdir(exist_ok=True)
    LICENSE.write_bytes(licence)
    partial = BUNDLE.with_suffix(".partial")
    partial.write_bytes(bundle)
    partial.replace(BUNDLE)
    return f"fetched {PACKAGE} {VERSION} into {BUNDLE} ({len(bundle) / 1e6:.1f} MB)"


def main() -> int:
    from plotly.offline import get_plotlyjs_version

    try:
        print(fetch(get_plotlyjs_version()))
    except (OSError, ValueError) as error:
        print(f"dashboard.fetch_bundle: {error}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())

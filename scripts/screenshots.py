"""Screenshots of the demo run's page, taken by the browser the page tests use (Debian's
Chromium through Playwright):

    .venv/bin/python scripts/screenshots.py [--run RUN_DIR] [--out references]

Without --run it runs the demo first (``opdebug demo`` into a temporary evidence root).
Writes ``page-grid.png`` (the verdict, the findings and the dtype x mode grid) and
``page-case.png`` (the table with the bfloat16 case opened: its call, metrics and error map)
into --out; README.md links them from references/.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
CHROMIUM = "/usr/bin/chromium"
FAILING_CASE = "rms.dtype-bfloat16"


def demo_run() -> Path:
    root = Path(tempfile.mkdtemp(prefix="opdebug-screenshots-"))
    proc = subprocess.run(
        [sys.executable, "-m", "tools.cli", "demo", "--root", str(root), "--json"],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=True,
    )
    return Path(json.loads(proc.stdout)["run_dir"])


def shoot(run: Path, out: Path) -> list[Path]:
    from playwright.sync_api import sync_playwright

    out.mkdir(parents=True, exist_ok=True)
    grid, case = out / "page-grid.png", out / "page-case.png"
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM)
        page = browser.new_page(viewport={"width": 1200, "height": 900}, device_scale_factor=1)
        page.goto((run / "run.html").as_uri())
        page.wait_for_selector("body[data-ready]")
        page.select_option("#grid-rows", label="dtype")
        page.select_option("#grid-cols", label="mode")
        bottom = page.locator("#grid-section").bounding_box()
        page.screenshot(
            path=str(grid),
            full_page=True,
            clip={"x": 0, "y": 0, "width": 1200, "height": bottom["y"] + bottom["height"]},
        )
        page.click(f'tr.case-row[data-case="{FAILING_CASE}"]')
        page.locator("tr.case-detail img").first.evaluate("img => img.decode()")
        page.locator("#cases-section").screenshot(path=str(case))
        browser.close()
    return [grid, case]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--run", type=Path, help="an analyzed demo run directory (default: run the demo)")
    parser.add_argument("--out", type=Path, default=REPO / "references", help="where the PNGs go")
    args = parser.parse_args()
    run = args.run.resolve() if args.run else demo_run()
    for path in shoot(run, args.out):
        print(path)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

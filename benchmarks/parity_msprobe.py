"""Parity with msprobe 26.2's own code, on many generated triples (run by hand):

    MSPROBE_WHEEL_ROOT=<unpacked mindstudio-probe 26.2.0 wheel> \\
        .venv/bin/python benchmarks/parity_msprobe.py [--seeds 12] [--n 4096]

(or OPDEBUG_MSPROBE_DOWNLOAD=1 to let tests/msprobe_adapter.py download the
wheel into its cache).  For every triple of tests/msprobe_families.py (the
families issue 22 names, float16 / bfloat16 / float32 and int64) at every
level - L0, L1, L2 forced, and msprobe's own level by API name (``matmul``:
L2, ``embedding``: L1) - it compares the project's ``benchmark`` verdict with
msprobe's, the ratios to 1e-6 relative, and counts the cases whose final
verdict differs from msprobe's only through a named ``checks`` entry.  Then the
other standards forced (ULP, binary, thousandth, absolute threshold) on the
floating triples.  Prints one table per part and exits 1 on any disagreement.
"""

from __future__ import annotations

import argparse
import collections
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "tests"))

import msprobe_adapter as msprobe  # noqa: E402
from msprobe_families import FAMILIES, agree, ours, triples  # noqa: E402

LEVELS = (("L0", "parity_op"), ("L1", "parity_op"), ("L2", "parity_op"), ("auto", "matmul"), ("auto", "embedding"))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seeds", type=int, default=12)
    parser.add_argument("--n", type=int, default=4096, help="elements per elementwise triple")
    args = parser.parse_args()
    ok, why = msprobe.available()
    if not ok:
        print(f"msprobe is not available: {why}")
        return 2
    print(f"msprobe: {why}")
    generated = triples(args.n, seeds=tuple(range(args.seeds)))
    table = collections.defaultdict(lambda: collections.Counter())
    checks = collections.Counter()
    wrong, t_ours, t_theirs = [], 0.0, 0.0
    for t in generated:
        for level, api in LEVELS:
            t0 = time.perf_counter()
            mine = ours(t, level, api)
            t1 = time.perf_counter()
            theirs = msprobe.judge("auto", None if level == "auto" else level, t.candidate, t.benchmark, t.truth,
                                   api_name=api)
            t_ours, t_theirs = t_ours + t1 - t0, t_theirs + time.perf_counter() - t1
            same, off = agree(mine, theirs)
            column = level if level != "auto" else f"auto:{api}"
            table[t.family][column, "n"] += 1
            table[t.family][column, "agree"] += same and not off
            table[t.family][column, "msprobe_pass"] += theirs["status"] == "pass"
            if not same or off:
                wrong.append((t.name, column, mine["benchmark"]["passed"], theirs["status"], off))
            elif mine["passed"] != (theirs["status"] == "pass"):
                named = [c["name"] for c in mine["checks"] if not c["passed"]]
                checks[named[0] if named else "UNNAMED"] += 1
                table[t.family][column, "by_checks"] += 1
                if not named:
                    wrong.append((t.name, column, "a final verdict differs with no named check"))
    columns = [lv if lv != "auto" else f"auto:{api}" for lv, api in LEVELS]
    print(f"\n== benchmark verdict vs msprobe: {len(generated)} triples x {len(columns)} levels "
          f"(agree/n; in brackets: final verdicts that differ through a named check) ==")
    print(f"{'family':22s}" + "".join(f"{c:>18s}" for c in columns))
    totals = collections.Counter()
    for family in FAMILIES:
        row = table[family]
        cells = []
        for c in columns:
            totals[c, "agree"] += row[c, "agree"]
            totals[c, "n"] += row[c, "n"]
            totals[c, "by_checks"] += row[c, "by_checks"]
            cells.append(f"{row[c, 'agree']}/{row[c, 'n']} [{row[c, 'by_checks']}]")
        print(f"{family:22s}" + "".join(f"{cell:>18s}" for cell in cells))
    print(f"{'all':22s}" + "".join(f"{str(totals[c, 'agree']) + '/' + str(totals[c, 'n']) + ' [' + str(totals[c, 'by_checks']) + ']':>18s}" for c in columns))
    print(f"final verdicts differing from msprobe, by check: {dict(checks)}")
    print("\nmsprobe's own verdicts (pass/n) per family and level:")
    print(f"{'family':22s}" + "".join(f"{c:>18s}" for c in columns))
    for family in FAMILIES:
        row = table[family]
        print(f"{family:22s}" + "".join(f"{str(row[c, 'msprobe_pass']) + '/' + str(row[c, 'n']):>18s}" for c in columns))
    n_calls = len(generated) * len(LEVELS)
    print(f"time per judgement ({args.n} elements): this project {t_ours / n_calls * 1e3:.2f} ms, "
          f"msprobe {t_theirs / n_calls * 1e3:.2f} ms")

    floats = [t for t in generated if t.family != "int_off_by_one"]
    print(f"\n== the other standards, forced, on {len(floats)} floating triples (agree/n, msprobe's pass/error) ==")
    for standard in ("ulp", "binary", "thousandth", "absolute"):
        agreed, verdicts = 0, collections.Counter()
        for t in floats:
            mine = ours(t, "L0", standard=standard)
            theirs = msprobe.judge(standard, None, t.candidate, t.benchmark, t.truth)
            same, off = agree(mine, theirs)
            agreed += same and not off
            verdicts[theirs["status"]] += 1
            if not same or off:
                wrong.append((t.name, standard, mine["benchmark"]["passed"], theirs["status"], off))
        print(f"{standard:12s} {agreed}/{len(floats)}   {dict(verdicts)}")
    if wrong:
        print(f"\n{len(wrong)} disagreements:")
        for item in wrong[:40]:
            print("  ", item)
        return 1
    print("\nno disagreement")
    return 0


if __name__ == "__main__":
    sys.exit(main())

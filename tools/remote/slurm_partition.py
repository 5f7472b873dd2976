"""What a Slurm host's partition offers, read-only: check_host's part for a scheduler host.

From the login host it runs ``sinfo --version``, ``scontrol -o show
partition [P]``, ``sinfo -h -N -p P -O NodeList,StateLong,Gres,GresUsed,CPUsState``
and ``squeue --me`` - no job is submitted, nothing is written - and compares
them with the inventory's request: the partition exists and is up, some node
that is up offers the GRES a slot asks for, the time limit fits the
partition's MaxTime, the account and QoS are allowed.  What does not fit is
named in ``missing``; the rest (how many slots can run at once, jobs left by a
server that is gone) in ``notes``.  python, torch and CANN on the nodes are
only seen by a job: the first case's ``environment`` says them.
"""

from __future__ import annotations

import re

from .inventory import HostConfig
from .slurm_commands import JOB_PREFIX, duration_s, owner_gone, show_field, time_limit_s
from .slurm_fields import slurm_options

# Node states in which a node takes no new job.
UNUSABLE_STATES = (
    "down",
    "drain",
    "drained",
    "draining",
    "fail",
    "failing",
    "future",
    "inval",
    "maint",
    "not_responding",
    "power_down",
    "powered_down",
    "powering_down",
    "reboot",
    "unknown",
)
_GRES_ITEM = re.compile(r"^([A-Za-z][A-Za-z0-9_]*)(?::([A-Za-z0-9_.-]+))?:(\d+)")


def gres_counts(text: str) -> dict[str, int]:
    """``npu:4(S:0),gpu:a100:2`` -> {"npu": 4, "gpu": 2} (types summed per name)."""
    out: dict[str, int] = {}
    for item in re.split(r",(?![^()]*\))", text or ""):
        m = _GRES_ITEM.match(item.strip())
        if m:
            out[m.group(1)] = out.get(m.group(1), 0) + int(m.group(3))
    return out


def _usable(state: str) -> bool:
    words = re.split(r"[+*~#!%$@^-]+", state.lower())
    return not any(w in UNUSABLE_STATES for w in words if w)


def _allowed(listing: str | None, name: str | None) -> bool:
    if not name or not listing or listing.upper() == "ALL":
        return True
    return name in listing.split(",")


async def partition_report(login, host: HostConfig) -> tuple[dict, list[str]]:
    """(the SchedulerCheck fields, what is missing) for a Slurm host, read-only."""
    o = slurm_options(host)
    missing: list[str] = []
    notes: list[str] = []
    report: dict = {
        "scheduler": "slurm",
        "partition": o.partition,
        "gres_requested": o.gres,
        "time_limit": o.time_limit,
        "slots": host.concurrency or 1,
        "nodes": [],
        "notes": notes,
    }
    code, out, err = await login.run(["sinfo", "--version"])
    if code != 0:
        missing.append(_no_slurm_client(code, out, err))
        return report, missing
    report["slurm_version"] = out.strip()
    part = await _partition_line(login, o, missing)
    if part is None:
        return report, missing
    name = _read_partition(part, o, report, missing)
    usable_total = await _read_nodes(login, o, name, report, missing)
    report["slots_possible"] = usable_total
    slots = host.concurrency or 1
    if 0 < usable_total < slots:
        notes.append(
            f"{slots} slots asked, but the partition's usable nodes hold {usable_total} slot(s) of "
            f"{o.gres} at most: the rest wait in the queue (or give up after {o.max_pending_s:g} s)"
        )
    notes.extend(await _own_jobs(login))
    notes.append(
        "python, torch and CANN on the nodes are not checked here (that takes a job): the first "
        "case's environment reports them"
    )
    return report, missing


def _no_slurm_client(code: int | None, out: str, err: str) -> str:
    """What is missing when ``sinfo --version`` fails: the login host itself, or Slurm's commands on it."""
    said = (err or out).strip()[-500:] or f"exit status {code}"
    if code is None and "cannot run sinfo" not in said:
        return f"a login host that answers: {said}"
    return (
        f"Slurm's client commands on the login host (sinfo --version: {said}); list a script "
        "that puts them on PATH (and sets SLURM_CONF where needed) in slurm.login_env_scripts"
    )


async def _partition_line(login, o, missing: list[str]) -> str | None:
    """``scontrol -o show partition``'s line of the partition asked for (else the default one), or None."""
    argv = ["scontrol", "-o", "show", "partition"] + ([o.partition] if o.partition else [])
    code, out, err = await login.run(argv)
    lines = [line for line in out.splitlines() if line.startswith("PartitionName=")]
    if not o.partition:
        lines = [line for line in lines if show_field(line, "Default") == "YES"] or lines[:0]
    if code != 0 or not lines:
        code_all, all_out, _ = await login.run(["scontrol", "-o", "show", "partition"])
        names = [
            show_field(line, "PartitionName") for line in all_out.splitlines() if line.startswith("PartitionName=")
        ]
        what = f"partition {o.partition!r}" if o.partition else "a default partition (give slurm.partition)"
        missing.append(f"{what} on this cluster (it has: {', '.join(n for n in names if n) or 'none'})")
        return None
    return lines[0]


def _read_partition(part: str, o, report: dict, missing: list[str]) -> str | None:
    """The partition's fields into ``report``; its state, MaxTime, accounts and QoS checked. Its name."""
    name = show_field(part, "PartitionName")
    report.update(
        partition=name,
        partition_state=show_field(part, "State"),
        max_time=show_field(part, "MaxTime"),
        default_time=show_field(part, "DefaultTime"),
        allow_accounts=show_field(part, "AllowAccounts"),
        allow_qos=show_field(part, "AllowQos"),
    )
    if report["partition_state"] != "UP":
        missing.append(f"partition {name} is {report['partition_state']}, not UP: it starts no job")
    limit, wanted = duration_s(report["max_time"]), time_limit_s(o.time_limit)
    if limit is not None and wanted is not None and wanted > limit:
        missing.append(f"slurm.time_limit {o.time_limit} within the partition's MaxTime {report['max_time']}")
    if not _allowed(report["allow_accounts"], o.account):
        missing.append(f"account {o.account} among the partition's AllowAccounts ({report['allow_accounts']})")
    if not _allowed(report["allow_qos"], o.qos):
        missing.append(f"QoS {o.qos} among the partition's AllowQos ({report['allow_qos']})")
    return name


async def _read_nodes(login, o, name: str | None, report: dict, missing: list[str]) -> int:
    """The partition's nodes (sinfo) into ``report``; how many slots its usable nodes hold at once."""
    code, out, err = await login.run(
        ["sinfo", "-h", "-N", "-p", name or "", "-O", "NodeList:|,StateLong:|,Gres:|,GresUsed:|,CPUsState:|"]
    )
    per_slot = int(o.gres.rsplit(":", 1)[1])
    gres_name = o.gres_name
    usable_total = 0
    for line in out.splitlines():
        parts = line.split("|")
        if len(parts) < 5 or not parts[0]:
            continue
        node, state, gres, used, cpus = (p.strip() for p in parts[:5])
        have = gres_counts(gres).get(gres_name, 0)
        usable = _usable(state)
        report["nodes"].append(
            {"name": node, "state": state, "gres": gres, "gres_used": used, "cpus": cpus, "usable": usable}
        )
        if usable and have >= per_slot:
            usable_total += have // per_slot
    if not report["nodes"]:
        missing.append(f"nodes in partition {name} (sinfo lists none)")
    elif not any(n["usable"] for n in report["nodes"]):
        missing.append(
            f"a node of partition {name} that takes jobs (states: "
            f"{', '.join(sorted({n['state'] for n in report['nodes']}))})"
        )
    elif usable_total == 0:
        offered = sorted({n["gres"] for n in report["nodes"]}) or ["none"]
        missing.append(
            f"GRES {o.gres} on a node of partition {name} that takes jobs (the nodes offer: "
            f"{', '.join(offered)}); set slurm.gres to what the cluster calls its devices"
        )
    return usable_total


async def _own_jobs(login) -> list[str]:
    """A note per job of this tool's in the queue (squeue --me), saying whose server it belongs to."""
    notes = []
    code, out, _ = await login.run(["squeue", "--me", "-h", "-o", "%i|%j|%T"])
    for line in out.splitlines():
        job_id, _, rest = line.partition("|")
        job_name, _, state = rest.partition("|")
        if not job_name.startswith(JOB_PREFIX):
            continue
        gone = owner_gone(job_name)
        whose = (
            "left by a server of this machine that is gone: the next run on this host cancels it"
            if gone
            else "of a running server"
            if gone is False
            else "of a server on another machine"
        )
        notes.append(f"job {job_id} ({job_name}, {state}) {whose}")
    return notes

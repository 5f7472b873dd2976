"""What a host has: a stdlib-only probe that check_host runs there as ``python - WORK_DIR KIND [STAGED]``.

Its source is sent on stdin (it is shipped, never built from arguments); it
prints one JSON object.  Imports torch (and torch_npu on NPU hosts) to report
their versions and the device count.
"""

import glob
import json
import os
import platform
import shutil
import sys
import time


def _version_from(path):
    try:
        with open(path, encoding="utf-8", errors="replace") as fh:
            for line in fh:
                key, _, value = line.partition("=")
                if key.strip().lower() in ("version", "toolkit_version", "runtime_version") and value.strip():
                    return value.strip()
    except OSError:
        pass
    return None


def cann_version():
    homes = [os.environ.get(v) for v in ("ASCEND_TOOLKIT_HOME", "ASCEND_HOME_PATH", "ASCEND_OPP_PATH")]
    homes = [h for h in homes if h]
    for home in homes:
        for base in (home, os.path.dirname(home.rstrip("/"))):
            candidates = [os.path.join(base, "version.cfg"), os.path.join(base, "version.info")]
            candidates += sorted(glob.glob(os.path.join(base, "*", "ascend_toolkit_install.info")))
            candidates += [
                os.path.join(base, "compiler", "version.info"),
                os.path.join(base, "runtime", "version.info"),
            ]
            for path in candidates:
                version = _version_from(path)
                if version:
                    return version, home, path
    return None, (homes[0] if homes else None), None


def main():
    work_dir, kind = sys.argv[1], sys.argv[2]
    marker = sys.argv[3] if len(sys.argv) > 3 else ""
    started = time.time()
    out = {
        "python": platform.python_version(),
        "python_executable": sys.executable,
        "hostname": platform.node(),
        "kind": kind,
        "errors": [],
    }
    statuses = os.environ.get("OPDEBUG_ENV_STATUS", "").split()
    out["env_script_status"] = [int(s) for s in statuses if s.lstrip("-").isdigit()]
    out["visibility"] = {
        k: os.environ[k] for k in ("ASCEND_RT_VISIBLE_DEVICES", "CUDA_VISIBLE_DEVICES") if k in os.environ
    }
    out["cann"], out["cann_home"], out["cann_version_file"] = cann_version()
    out["torch"] = out["torch_npu"] = out["device_count"] = None
    try:
        import torch

        out["torch"] = torch.__version__
        if kind == "npu":
            try:
                import torch_npu

                out["torch_npu"] = getattr(torch_npu, "__version__", "unknown")
                out["device_count"] = torch.npu.device_count()
            except Exception as exc:
                out["errors"].append(f"torch_npu: {type(exc).__name__}: {exc}")
        elif kind == "cuda":
            out["device_count"] = torch.cuda.device_count()
        else:
            out["device_count"] = os.cpu_count()
    except Exception as exc:
        out["errors"].append(f"torch: {type(exc).__name__}: {exc}")
    probe = work_dir
    while probe and not os.path.isdir(probe):
        probe = os.path.dirname(probe.rstrip("/")) or "/"
        if probe == "/":
            break
    try:
        out["free_disk_bytes"] = shutil.disk_usage(probe or "/").free
    except OSError as exc:
        out["free_disk_bytes"] = None
        out["errors"].append(f"disk: {exc}")
    try:
        os.makedirs(work_dir, exist_ok=True)
        test = os.path.join(work_dir, f".opdebug-probe-{os.getpid()}")
        with open(test, "w") as fh:
            fh.write("ok")
        os.unlink(test)
        out["work_dir_writable"] = True
    except OSError as exc:
        out["work_dir_writable"] = False
        out["errors"].append(f"work_dir: {exc}")
    # A file of the runner the host's kind staged as a slot would (SFTP, through a command...): seeing
    # it here proves the worker sees what is staged for it (a container's mounts).
    out["marker_seen"] = bool(marker) and os.path.isfile(os.path.join(work_dir, marker))
    out["probe_s"] = round(time.time() - started, 3)
    sys.stdout.write(json.dumps(out) + "\n")


main()

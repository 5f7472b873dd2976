"""Kills its worker and leaves every later worker unable to start, as a driver
that wedges the device does: the candidate writes a sitecustomize.py that
exits at interpreter start-up into ``site_dir`` (a directory on the
workers' PYTHONPATH), then exits.  The supervisor's replacement workers die
during start-up, one after another."""
import os


def cand(x, site_dir=""):
    with open(os.path.join(site_dir, "sitecustomize.py"), "w") as fh:
        fh.write("import os\nos._exit(17)\n")
    os._exit(9)


def ref(x, site_dir=""):
    return x

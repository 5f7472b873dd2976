"""Which modes the hosts can run, from what the inventory says of each host's
device: a graph capture needs an accelerator's graph API (``torch.npu.NPUGraph``,
``torch.cuda.CUDAGraph``), so a CPU host runs eager and compile only.  Next
cases never propose a mode no host of the call can run, whatever the recorded
results say (a result recorded without its environment says nothing).
"""

from __future__ import annotations

from .errors import ToolError
from .schemas import MODES

# device kind (the inventory's ``device``) -> the modes a host of that kind can run
DEVICE_MODES = {"cpu": ("eager", "compile"), "cuda": MODES, "npu": MODES}


def runnable_modes(hosts: list[str] | None = None, inventory=None) -> set[str] | None:
    """The modes some host of ``hosts`` (None: every host of the inventory) can run; None when the inventory
    cannot be read (then the recorded results decide, as before)."""
    from .remote.inventory import as_inventory  # the inventory's pydantic models: only when asked

    try:
        inv = as_inventory(inventory)
        configs = inv.resolve(hosts) if hosts else [inv.get(n) for n in inv.names()]
    except ToolError:
        return None
    return {m for cfg in configs for m in DEVICE_MODES.get(cfg.device, MODES)}

"""The runner: executes one operator case exactly, on the device host.

Shipped to device hosts that do not have this project: it depends on the
standard library and torch only (torch_npu only inside the NPU adapter), and
imports its own modules relatively, so the same files run as ``tools.runner``
here and as ``opdebug_runner`` when copied elsewhere.  Importing this package
imports nothing heavy: the supervisor never imports torch; the worker does.

See references/runner-protocol.md for the processes and messages.
"""

RUNNER_VERSION = "0.1.0"
PROTOCOL = 1

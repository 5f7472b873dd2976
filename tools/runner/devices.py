"""Device adapters: cpu, cuda, npu.

One adapter per device kind: its name, synchronize, moving an input to the
device with its strides and offset preserved, storage-format casts (NPU only),
the compile backend, graph capture + replay, and a health check.  torch_npu
(and torchair) are imported only inside the NPU adapter.  A mode or layout
the device cannot do raises ``Unsupported`` with a reason that says so.
"""

from __future__ import annotations

import torch

# torch_npu.npu_format_cast ids (Ascend storage formats).
NPU_FORMATS = {"NCHW": 0, "NHWC": 1, "ND": 2, "NC1HWC0": 3, "FRACTAL_Z": 4, "FRACTAL_NZ": 29}


class Unsupported(Exception):
    """The device cannot do what the case asks (a mode, a layout)."""

    def __init__(self, reason: str, rule: str, phase: str | None = None):
        super().__init__(reason)
        self.reason = reason
        self.rule = rule
        self.phase = phase  # the phase it names in the error (backward), when not the candidate's forward


class Device:
    kind = "cpu"

    def __init__(self) -> None:
        self.torch_device = torch.device(self.kind if self.kind == "cpu" else f"{self.kind}:0")

    @property
    def label(self) -> str:
        return str(self.torch_device)

    def info(self) -> dict:
        return {"device": self.label, "device_kind": self.kind, "device_count": 1}

    def synchronize(self) -> None:
        pass

    def to_device(self, storage: torch.Tensor, shape, strides, offset: int) -> torch.Tensor:
        """The same storage on the device, viewed with the same strides and offset."""
        base = storage if self.kind == "cpu" else storage.to(self.torch_device)
        return base.as_strided(shape, strides, offset)

    def format_cast(self, tensor: torch.Tensor, layout: str) -> torch.Tensor:
        if layout == "ND":
            return tensor
        raise Unsupported(
            f"layout {layout} is an Ascend storage format (npu_format_cast); this host's device is {self.kind}",
            "runner: storage formats need an npu device",
        )

    def compile(self, fn, backend: str | None, dynamic=False):
        """``dynamic``: False (static shapes), True (dynamic shapes), or a list of
        dimensions marked dynamic on the inputs (then dynamo's default, None)."""
        import torch._dynamo

        # A fresh dynamo state per case: past recompilation limits, dynamo
        # would fall back to eager silently.
        torch._dynamo.reset()
        return torch.compile(fn, backend=_backend(backend) or "inductor", dynamic=_dynamic(dynamic), fullgraph=False)

    def graph_call(self, fn, args, kwargs, on_captured=None):
        raise Unsupported(
            f"graph capture needs a cuda or npu device; this host's device is {self.kind}",
            "runner: graph mode needs a cuda or npu device",
        )

    def health_check(self) -> None:
        x = torch.ones(4, device=self.torch_device)
        value = float((x + 1).sum().item())
        self.synchronize()
        if value != 8.0:
            raise RuntimeError(f"health check on {self.label}: 4 ones + 1 summed to {value}, not 8")


class CudaDevice(Device):
    kind = "cuda"

    def __init__(self) -> None:
        super().__init__()
        torch.cuda.set_device(self.torch_device)

    def info(self) -> dict:
        return {
            "device": self.label,
            "device_kind": self.kind,
            "device_count": torch.cuda.device_count(),
            "device_name": torch.cuda.get_device_name(0),
        }

    def synchronize(self) -> None:
        torch.cuda.synchronize()

    def graph_call(self, fn, args, kwargs, on_captured=None):
        return _graph_capture_replay(torch.cuda, torch.cuda.CUDAGraph, fn, args, kwargs, on_captured)


class NpuDevice(Device):
    kind = "npu"

    def __init__(self) -> None:
        import torch_npu  # registers the npu device with torch

        self.torch_npu = torch_npu
        # torch.npu exists once torch_npu is imported; torch's own stubs do not declare it
        self.npu = torch.npu  # type: ignore[attr-defined]
        super().__init__()
        self.npu.set_device(self.torch_device)

    def info(self) -> dict:
        info = {
            "device": self.label,
            "device_kind": self.kind,
            "device_count": self.npu.device_count(),
            "torch_npu": getattr(self.torch_npu, "__version__", None),
        }
        try:
            info["device_name"] = self.npu.get_device_name(0)
        except Exception:  # informational only
            pass
        return info

    def synchronize(self) -> None:
        self.npu.synchronize()

    def format_cast(self, tensor: torch.Tensor, layout: str) -> torch.Tensor:
        if layout == "ND":
            return tensor
        return self.torch_npu.npu_format_cast(tensor, NPU_FORMATS[layout])

    def compile(self, fn, backend: str | None, dynamic=False):
        import torch._dynamo

        torch._dynamo.reset()
        if backend in (None, "torchair"):
            import torchair

            # torchair's NPU backend compiles the backward too (AOTAutograd), and dynamic shapes
            config = torchair.CompilerConfig()
            backend = torchair.get_npu_backend(compiler_config=config)
        return torch.compile(fn, backend=_backend(backend), dynamic=_dynamic(dynamic), fullgraph=False)

    def graph_call(self, fn, args, kwargs, on_captured=None):
        return _graph_capture_replay(self.npu, self.npu.NPUGraph, fn, args, kwargs, on_captured)


def _dynamic(dynamic):
    """torch.compile's ``dynamic`` for a case's compile_dynamic: True, or None when dimensions are marked."""
    if dynamic is True:
        return True
    return None if dynamic else False


def _backend(backend):
    """A compile backend by registered name, or a dotted callable (e.g. one in a user module)."""
    if isinstance(backend, str) and "." in backend:
        from .callables import resolve

        return resolve(backend)
    return backend


def _graph_capture_replay(module, graph_cls, fn, args, kwargs, on_captured=None):
    """Warm up on a side stream, capture one call on the static inputs, replay it.

    The warm-up runs the candidate too: the inputs' storages are put back to
    their values before the replay, so an in-place operator applies once."""
    inputs = [
        t
        for a in list(args) + list(kwargs.values())
        for t in (a if isinstance(a, (list, tuple)) else [a])
        if isinstance(t, torch.Tensor)
    ]  # lists too
    saved = [_storage_copy(t) for t in inputs]
    stream = module.Stream()
    stream.wait_stream(module.current_stream())
    with module.stream(stream):
        fn(*args, **kwargs)
    module.current_stream().wait_stream(stream)
    module.synchronize()
    graph = graph_cls()
    with module.graph(graph):
        out = fn(*args, **kwargs)
    for t, original in zip(inputs, saved, strict=True):
        if original is not None:
            t.untyped_storage().copy_(original)
    if on_captured is not None:
        on_captured()
    graph.replay()
    module.synchronize()
    return out


def _storage_copy(t: torch.Tensor):
    """A copy of the tensor's whole storage (strides, offset and a storage format
    included), or None where the backend cannot give one (then not restored)."""
    try:
        return t.untyped_storage().clone()
    except Exception:  # best effort: a pure candidate needs no restore
        return None


def make_device(kind: str) -> Device:
    if kind == "cpu":
        return Device()
    if kind == "cuda":
        if not torch.cuda.is_available():
            raise RuntimeError("device 'cuda' requested but torch.cuda.is_available() is False")
        return CudaDevice()
    if kind == "npu":
        return NpuDevice()
    raise ValueError(f"unknown device kind {kind!r} (cpu, cuda or npu)")

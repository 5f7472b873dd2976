"""A compile backend whose dynamic-shape backward is wrong (AOTAutograd with
its own forward and backward compilers): a backward graph traced with
symbolic sizes (compile with dynamic shapes, or a dimension marked dynamic)
scales every gradient by 1.01; the static backward, and every forward, are
right.  The candidate and the reference are the same plain function, so
only the compiled path can fail (``operator.compile_backend:
dynamic_backend.backend``)."""
import torch
from torch._dynamo.backends.common import aot_autograd
from torch._functorch.aot_autograd import make_boxed_func


def _symbolic(gm) -> bool:
    for node in gm.graph.nodes:
        if node.op == "placeholder":
            val = node.meta.get("val")
            if isinstance(val, torch.SymInt):
                return True
            if isinstance(val, torch.Tensor) and any(isinstance(s, torch.SymInt) for s in val.shape):
                return True
    return False


def _forward(gm, example_inputs):
    return make_boxed_func(gm.forward)


def _backward(gm, example_inputs):
    if not _symbolic(gm):
        return make_boxed_func(gm.forward)

    def wrong(args):  # the planted bug: the dynamic-shape kernels' gradients are 1% off
        return [o * 1.01 if isinstance(o, torch.Tensor) else o for o in gm.forward(*args)]

    wrong._boxed_call = True
    return wrong


backend = aot_autograd(fw_compiler=_forward, bw_compiler=_backward)


def cand(x, weight):
    return (x * weight).sin()


def ref(x, weight):
    return (x * weight).sin()

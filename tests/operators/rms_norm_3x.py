"""npu_rms_norm's contract (y, rstd) with one planted error for bfloat16:
the element with the largest |y| is off by 3 * 2**-8 relative (3x msprobe's
measure of a correct bfloat16 computation, whose max relative error is below
msprobe's bfloat16 ratio floor of 2**-8); every other element and rstd are
exact.  msprobe's benchmark ratio for max_rel is then about 3: over L2's 2,
under L0's 10.  Other dtypes are correct."""
import torch

PLANTED_REL = 3 * 2 ** -8


def rms_norm(self, gamma, epsilon=1e-06):
    dims = tuple(range(self.dim() - gamma.dim(), self.dim()))
    xf = self.float()
    rstd = torch.rsqrt(xf.pow(2).mean(dim=dims, keepdim=True) + epsilon)
    exact = xf * rstd * gamma.float()
    y = exact.to(self.dtype).contiguous()
    if self.dtype == torch.bfloat16:
        flat, wide = y.reshape(-1), exact.reshape(-1)
        i = int(wide.abs().argmax())
        flat[i] = (wide[i] * (1 + PLANTED_REL)).to(torch.bfloat16)
    return y, rstd

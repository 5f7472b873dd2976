"""Wrong on the batched (rank-3) path when its middle dimension is over 7:
x.shape[1] > 7 is all a rank-3 star shows, but a rank-2 input (whose second
dimension is its last) takes another path and passes."""
import torch


def cand(x):
    out = torch.tanh(x)
    return out + 0.1 if x.dim() == 3 and x.shape[1] > 7 else out


def ref(x):
    return torch.tanh(x)

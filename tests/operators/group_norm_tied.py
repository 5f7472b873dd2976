"""A group norm wrong when a group holds more than 8 channels and not a multiple of 8 (the channels per
group, ``x.shape[1] // attr.groups``, a dimension divided by an integer attribute).  The candidate does not
check the channel count; the reference (torch's group_norm) refuses a call whose channels the groups do
not divide, so shrinking or probing the channels alone makes invalid calls."""
import torch
import torch.nn.functional as F


def cand(x, groups=1):
    if x.shape[1] % groups:  # no check: a kernel that reads past its groups (not a valid call)
        return torch.zeros_like(x)
    out = F.group_norm(x, groups)
    per_group = x.shape[1] // groups
    if per_group > 8 and per_group % 8:
        out = out + 0.5
    return out


def ref(x, groups=1):
    return F.group_norm(x, groups)

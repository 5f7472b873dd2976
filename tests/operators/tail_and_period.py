"""Two planted layouts of wrong elements: ``mode="tail"`` is wrong from column 96 on (a tail block
along the last dimension), ``mode="period"`` on every 8th column."""


def cand(x, mode):
    y = x * 2
    if mode == "tail":
        y[..., 96:] += 1.0
    elif mode == "period":
        y[..., 3::8] += 1.0
    return y


def ref(x, mode):
    return x * 2

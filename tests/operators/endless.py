"""Never returns when asked to spin (an endless loop)."""


def cand(x, spin=False):
    while spin:
        pass
    return x - 1


def ref(x, spin=False):
    return x - 1

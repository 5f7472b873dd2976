"""The candidate is quick; the CPU reference takes `ref_s` seconds (a large
case's float32 reference on CPU): a timeout there is not the candidate's crash."""
import time


def cand(x, ref_s):
    return x * 1


def ref(x, ref_s):
    time.sleep(ref_s)
    return x * 1

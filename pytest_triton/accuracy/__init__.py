"""Accuracy layer: is a faster deployment still good enough? A metric of the served answers on
a dataset against the same metric of the fp32 PyTorch reference on the same data, judged by
an MLPerf-style ratio with a confidence interval (`assert_accuracy`, `AccuracyResult`).

Element-wise parity (the parity layer) asks whether the served model computes what PyTorch
computes; an INT8 or fp16 deployment does not, by design, and is judged here instead.

Rule: imports only `base`, `client` and `parity`; no torch (the reference is a callable).
"""

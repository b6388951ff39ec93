#!/usr/bin/python3
# Derives the polynomial for e^r, |r| <= ln2/2, of expReduced512 (degree 6, the default) or
# silu512 (degree 5) in libkernels/cpu/gemm_vector_epilogue.h: a least-squares fit of the
# relative error on 4001 Chebyshev points, reweighted toward the worst points (Lawson's
# iteration) so that it approaches the minimax fit. Prints the coefficients as float literals
# (degree 6: c0 and c1 round to exactly 1) and the maximum relative error in exact arithmetic
# and evaluated in float32 by Horner's rule with one rounding per step, as an FMA gives.
#
#   /usr/bin/python3 scripts/fit_exp_polynomial.py [DEGREE]    (needs Debian's python3-numpy)
import sys

import numpy as np

HALF_LN2 = np.log(2.0) / 2
DEGREE = int(sys.argv[1]) if len(sys.argv) > 1 else 6

x = np.cos(np.linspace(0.0, np.pi, 4001)) * HALF_LN2
f = np.exp(x)
vander = np.vander(x, DEGREE + 1, increasing=True)
weights = np.ones_like(x)
for _ in range(60):
    coeffs, *_ = np.linalg.lstsq(vander * (weights / f)[:, None], weights, rcond=None)
    err = vander @ coeffs / f - 1.0
    weights = weights * (1.0 + 5.0 * np.abs(err) / np.abs(err).max())
    weights /= weights.max()

as_float = coeffs.astype(np.float32)
r = np.linspace(-HALF_LN2, HALF_LN2, 200001).astype(np.float32)
p = np.full_like(r, as_float[DEGREE])
for k in range(DEGREE - 1, -1, -1):
    p = (p.astype(np.float64) * r.astype(np.float64) + np.float64(as_float[k])).astype(np.float32)
float_err = np.abs(p.astype(np.float64) / np.exp(r.astype(np.float64)) - 1.0).max()

for k in range(DEGREE, -1, -1):
    print(f"c{k} = {float(as_float[k])!r}f")
print(f"max relative error: {np.abs(err).max():.3g} exact, {float_err:.3g} in float32")

"""Batched power-of-two FFTs on the device (cl_kernels/common/fft.cl), and the
autocorrelation sums of real series through them.

Own kernels rather than a library: they build from the same Mako templates on every
OpenCL device (PoCL, Oclgrind and GPUs alike, in float or double), need no compiler or
binary at install (pyvkfft builds VkFFT with a C++ compiler; reikna brings its own
array/kernel layers), and the real-to-complex step and the power spectrum are fused
into one kernel between the two transforms.  Every pass reads and writes the data once
(Stockham: no bit reversal), a radix of up to 128 (double) or 256 (float) in local
memory, so 2^24 complex values take 4 passes each way.
"""

from __future__ import annotations

import numpy as np
import pyopencl as cl
import pyopencl.array as cla

from ..errors import DeviceError


def _radix_bits(dev, csize: int, J: int) -> int:
    """The largest pass radix (as bits) whose J columns fit local memory (<= 32 KiB)."""
    room = min(dev.facts.local_mem // 2, 32 * 1024)
    bits = 1
    while (2 << bits) * J * csize <= room and bits < 8:
        bits += 1
    return bits


def plan(n: int, max_bits: int) -> list[int]:
    """Radix bits of the passes of a length-n transform: as few passes as max_bits
    allows, of nearly equal sizes (e.g. 2^24 with 7: [6, 6, 6, 6])."""
    bits = n.bit_length() - 1
    if bits == 0:
        return []
    count = -(-bits // max_bits)
    return [bits // count + (1 if i < bits % count else 0) for i in range(count)]


class FFT:
    """Complex FFTs of `batch` rows of n = 2^k values (real_t "float" or "double"),
    unnormalised, forward (sign -1) and inverse (+1), between ping-pong buffers; and
    the autocorrelation step of fft.cl.  Twiddle tables are for order 2n (the real
    transforms of length 2n need w_{2n}).  `max_bits` caps the passes' radix (tests
    use it to cover several passes at small n); `jmax` the columns per work group (the
    benchmarks try several)."""

    def __init__(self, dev, n: int, batch: int, real: str, max_bits: int | None = None,
                 jmax: int | None = None):
        if n < 1 or n & (n - 1):
            raise ValueError(f"FFT length must be a power of two, got {n}")
        self.dev, self.n, self.batch, self.real = dev, n, batch, real
        self.csize = 16 if real == "double" else 8
        self.cdtype = np.complex128 if real == "double" else np.complex64
        Jmax = jmax or (16 if dev.facts.is_gpu else 4)     # columns per work group
        self.passes = []
        Ns = 1
        for b in plan(n, max_bits or _radix_bits(dev, self.csize, Jmax)):
            R = 1 << b
            r = min(8, R)
            J = min(Jmax, max(1, n // R))
            while (R // r) * J > dev.facts.max_work_group and J > 1:
                J //= 2
            self.passes.append((R, r, J, Ns))
            Ns *= R
        lgt = (2 * n).bit_length() - 1
        self.lgt, self.h = lgt, (lgt + 1) // 2
        i = np.arange(1 << self.h)
        lo = np.exp(-2j * np.pi * i / (2 * n))
        hi = np.exp(-2j * np.pi * np.arange(1 << (lgt - self.h)) * (1 << self.h) / (2 * n))
        try:
            self.lo = cla.to_device(dev.queue, lo.astype(self.cdtype))
            self.hi = cla.to_device(dev.queue, hi.astype(self.cdtype))
        except cl.MemoryError:
            raise DeviceError(f"{dev.name}: out of device memory for the FFT tables") from None

    def table_bytes(self) -> int:
        return ((1 << self.h) + (1 << (self.lgt - self.h))) * self.csize

    def _prg(self, R, r, J, sign):
        return self.dev.build("common/fft.cl", real=self.real, R=R, r=r, J=J, sign=sign)

    def launches(self, src: cl.Buffer, a: cl.Buffer, b: cl.Buffer, sign: int):
        """The passes of one transform of `src` as a list of callables (one launch each,
        for time-bounded slices), and the buffer that will hold the result.  The passes
        alternate between a and b; src is only read (it may be a or b)."""
        out, steps = src, []
        for R, r, J, Ns in self.passes:
            dst = a if out is not a else b
            prg = self._prg(R, r, J, sign)

            def launch(prg=prg, R=R, r=r, J=J, Ns=Ns, inp=out, dst=dst):
                prg.fft_pass(self.dev.queue, ((self.n // R) * (R // r), self.batch),
                             ((R // r) * J, 1), inp, dst, np.uint32(self.n), np.uint32(Ns),
                             np.uint32(self.lgt), np.uint32(self.h), self.lo.data, self.hi.data)
            steps.append(launch)
            out = dst
        return steps, out

    def power(self, buf: cl.Buffer):
        """The step between the forward and inverse transforms of an autocorrelation:
        buf holds the forward transforms of the rows' packed real series (fft.cl)."""
        prg = self._prg(2, 2, 1, -1)
        prg.fft_real_power(self.dev.queue, (self.n // 2 + 1, self.batch), None, buf,
                           np.uint32(self.n), np.uint32(self.h), self.lo.data, self.hi.data)


def fft_length(longest: int, max_lag: int) -> int:
    """Reals per row: the circular autocorrelation of a zero-padded row of this length
    equals the linear one up to max_lag (a power of two >= T + max_lag, at least 4)."""
    n = max(4, longest + max_lag)
    return 1 << (n - 1).bit_length()


def cost(lengths, max_lag: int) -> tuple[float, float]:
    """(pair terms of the direct sums, L log2 L summed over the rows of the FFT)."""
    L = fft_length(int(max(lengths)), max_lag)
    return float(np.sum(lengths)) * max_lag, len(lengths) * L * np.log2(L)

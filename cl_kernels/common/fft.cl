## Batched complex FFT of power-of-two length N (Stockham autosort, no bit reversal), and
## the step between the forward and inverse transforms of an autocorrelation by FFT.
##
## A transform is a sequence of passes (clphys.fft plans them); pass p has radix R (a power
## of two) and stride Ns = product of the earlier radices, and maps `in` to `out`:
##     for every column j < N/R:  v[m] = in[j + m N/R] w^{(j mod Ns) m / (Ns R)},  m < R,
##     V = the R-point DFT of v,  out[(j / Ns) Ns R + j mod Ns + k Ns] = V[k]
## with w = e^{sign 2 pi i}.  A work group does J consecutive columns: it reads them
## coalesced (J consecutive values per m), does the R-point DFTs in local memory as
## passes of radix r (each item an r-point DFT in registers), and writes coalesced.
## Twiddles come from two tables of the roots of unity of order Lt = 2^lgt (a power of two
## >= N; lo[i] = w^i for i < 2^h, hi[i] = w^(i 2^h)), exact to the rounding of real_t.
##
## params: real  "float" | "double";  R, r, J as above (powers of two, r <= R);
##         sign  -1 (forward) | +1 (inverse, unnormalised)
<%
    if real not in ("float", "double") or (real == "double" and not dev.fp64):
        raise ValueError("fft.cl: real must be 'float', or 'double' on a device with fp64")
    for name, v in (("R", R), ("r", r), ("J", J)):
        if v < 1 or v & (v - 1):
            raise ValueError("fft.cl: %s must be a power of two, got %r" % (name, v))
    if r > R or sign not in (-1, 1):
        raise ValueError("fft.cl: need r <= R and sign -1 or +1")
    import math
    P = R // r                      # items per column
    lgR = R.bit_length() - 1
    # local passes: radix r while it divides, then the rest
    subs, ns = [], 1
    while ns < R:
        rs = min(r, R // ns)
        subs.append((ns, rs))
        ns *= rs

    def dft(names, sgn):
        """Straight-line radix-2 DIT of len(names) values held in the variables `names`
        (transformed in place); returns (code, names of X[0], X[1], ...)."""
        n = len(names)
        bits = n.bit_length() - 1
        rev = [int(format(i, "0%db" % bits)[::-1], 2) if bits else 0 for i in range(n)]
        x = [names[rev[i]] for i in range(n)]
        lines = []
        half = 1
        while half < n:
            for start in range(0, n, 2 * half):
                for k in range(half):
                    a, b = x[start + k], x[start + k + half]
                    ang = sgn * 2.0 * math.pi * k / (2 * half)
                    c, s = math.cos(ang), math.sin(ang)
                    if k == 0:
                        tw = b
                    elif 4 * k == 2 * half:          # w = sgn i
                        tw = "(%s2)(-%s.y, %s.x)" % (real, b, b) if sgn > 0 else \
                             "(%s2)(%s.y, -%s.x)" % (real, b, b)
                    else:
                        tw = "fc_mul(%s, (%s2)(%.17g, %.17g))" % (b, real, c, s)
                    lines.append("{ const %s2 t = %s; %s = %s - t; %s = %s + t; }"
                                 % (real, tw, b, a, a, a))
            half *= 2
        return "\n        ".join(lines), x
%>
% if real == "double":
#pragma OPENCL EXTENSION cl_khr_fp64 : enable
% endif
typedef ${real} fc_real;
typedef ${real}2 fc_t;

inline fc_t fc_mul(const fc_t a, const fc_t b)
{
    return (fc_t)(a.x * b.x - a.y * b.y, a.x * b.y + a.y * b.x);
}

// Memory holds complex values as real pairs, read and written with vload2/vstore2: a store
// of a vector built from its two parts (fc_t)(x, y) reads as uninitialised to Oclgrind's
// checker (its base vector is LLVM's poison); the element-wise forms are the same bits.
#define FC_LD(p, i) vload2((i), (p))
#define FC_ST(v, p, i) vstore2((v), (i), (p))

// w^a, w = e^{sign 2 pi i / Lt}, from the two tables (lo: w^i, i < 2^h; hi: w^(i 2^h)).
inline fc_t fc_tw(__global const fc_real *lo, __global const fc_real *hi, const uint h,
                  const uint a)
{
    const fc_t t = fc_mul(FC_LD(hi, a >> h), FC_LD(lo, a & ((1u << h) - 1u)));
% if sign > 0:
    return (fc_t)(t.x, -t.y);           // the tables hold the forward roots
% else:
    return t;
% endif
}

__kernel __attribute__((reqd_work_group_size(${P * J}, 1, 1)))
void fft_pass(__global const fc_real *in, __global fc_real *out, const uint N, const uint Ns,
              const uint lgt, const uint h, __global const fc_real *lo,
              __global const fc_real *hi)
{
    __local fc_real lm[${2 * R * J}];
    const uint lid = get_local_id(0);
    const uint c = lid % ${J}u, p = lid / ${J}u;     // column in the group, item in the column
    const size_t base = (size_t)get_group_id(1) * N;
    const uint j = get_group_id(0) * ${J}u + c;     // the column
    const uint cols = N >> ${lgR}u;                  // N / R
    const uint lgNs = 31u - clz(Ns);
% for i in range(r):
    fc_t v${i} = FC_LD(in, base + j + (size_t)(p + ${i * P}u) * cols);
% endfor
    if (Ns > 1u) {                                   // w^{(j mod Ns) m / (Ns R)}, m = p + i P
        const uint jm = j & (Ns - 1u), sh = lgt - lgNs - ${lgR}u;
% for i in range(r):
        v${i} = fc_mul(v${i}, fc_tw(lo, hi, h, (jm * (p + ${i * P}u)) << sh));
% endfor
    }
## the first local pass (ns = 1, radix r) takes the item's own values: no local read
<% code0, X0 = dft(["v%d" % i for i in range(r)], sign) %>
    {
        ${code0}
    }
% for i in range(r):
    FC_ST(${X0[i]}, lm, (p * ${r}u + ${i}u) * ${J}u + c);
% endfor
% for ns, rs in subs[1:]:
<%
    per = r // rs                   # butterflies per item in this pass
    code, X = dft(["u%d" % i for i in range(rs)], sign)
    lgbase = (ns * rs).bit_length() - 1
%>
    {                                // local pass: ns = ${ns}, radix ${rs}
    barrier(CLK_LOCAL_MEM_FENCE);
%   for u in range(per):
%     for i in range(rs):
    const fc_t a${u}_${i} = FC_LD(lm, (p + ${u * P}u + ${i * (R // rs)}u) * ${J}u + c);
%     endfor
%   endfor
    barrier(CLK_LOCAL_MEM_FENCE);
%   for u in range(per):
    {
        const uint jj = p + ${u * P}u, k = jj & ${ns - 1}u;
%     for i in range(rs):
        fc_t u${i} = a${u}_${i};
%     endfor
%     if ns > 1:
%       for i in range(1, rs):
        u${i} = fc_mul(u${i}, fc_tw(lo, hi, h, (k * ${i}u) << (lgt - ${lgbase}u)));
%       endfor
%     endif
        ${code}
        const uint o = (jj / ${ns}u) * ${ns * rs}u + k;
%     for i in range(rs):
        FC_ST(${X[i]}, lm, (o + ${i * ns}u) * ${J}u + c);
%     endfor
    }
%   endfor
    }
% endfor
    barrier(CLK_LOCAL_MEM_FENCE);
    const uint j0 = get_group_id(0) * ${J}u;
    if (Ns >= ${J}u) {               // J consecutive columns share j / Ns: J consecutive outputs
        const size_t o = base + (size_t)(j >> lgNs) * Ns * ${R}u + (j & (Ns - 1u));
% for i in range(r):
        FC_ST(FC_LD(lm, (p + ${i * P}u) * ${J}u + c), out, o + (size_t)(p + ${i * P}u) * Ns);
% endfor
    } else {                         // the group's outputs are [j0 R, (j0 + J) R): in order
% for i in range(r):
        {
            // shifts, not '/' beside '%': LLVM would pair them with a `freeze`, which
            // Oclgrind's checker lacks (Ns R is a power of two)
            const uint q = lid + ${i * P * J}u;
            const uint rem = q & ((Ns << ${lgR}u) - 1u);
            const uint cc = (q >> (lgNs + ${lgR}u)) * Ns + (rem & (Ns - 1u));
            FC_ST(FC_LD(lm, (rem >> lgNs) * ${J}u + cc), out, base + (size_t)j0 * ${R}u + q);
        }
% endfor
    }
}

## ---- autocorrelation by FFT: x real of length L = 2N (zero padded), sent as the N complex
## values z[m] = x[2m] + i x[2m+1], Z = DFT_N(z).  With X the DFT of x and P = |X|^2,
## ts_real_power replaces Z by Y = (1/N) DFT_N(c_e + i c_o), c = IDFT_L(P) the circular
## autocorrelation, c_e, c_o its even and odd samples; the unnormalised inverse DFT_N of Y
## is then c itself, viewed as 2N reals.  Item k <= N/2 does k and N - k (in place).
## Uses the tables of order Lt = 2N with sign -1 (w_L^k).
% if sign < 0:
__kernel void fft_real_power(__global fc_real *z, const uint N, const uint h,
                             __global const fc_real *lo, __global const fc_real *hi)
{
    const uint k = get_global_id(0);
    if (k > N / 2u) return;
    __global fc_real *row = z + (size_t)get_global_id(1) * N * 2u;
    const uint k2 = k ? N - k : 0u;
    const fc_t a = FC_LD(row, k), b = FC_LD(row, k2);
    const fc_t E = (fc_t)(0.5f * (a.x + b.x), 0.5f * (a.y - b.y));      // (Z[k] + conj Z[k'])/2
    const fc_t O = (fc_t)(0.5f * (a.y + b.y), -0.5f * (a.x - b.x));     // (Z[k] - conj Z[k'])/2i
    const fc_t w = fc_tw(lo, hi, h, k);
    const fc_t wo = fc_mul(w, O);
    const fc_t X1 = E + wo, X2 = E - wo;             // X[k], conj X[N - k]
    const fc_real P1 = X1.x * X1.x + X1.y * X1.y, P2 = X2.x * X2.x + X2.y * X2.y;
    const fc_real s = (fc_real)1 / (fc_real)N;       // a power of two: exact
    const fc_real S = 0.5f * (P1 + P2) * s, D = 0.5f * (P1 - P2) * s;
    FC_ST(((fc_t)(S + D * w.y, D * w.x)), row, k);
    if (k && k2 != k) FC_ST(((fc_t)(S - D * w.y, D * w.x)), row, k2);
}
% endif
